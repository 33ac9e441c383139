"""The Triton decode kernels at GQA (h_kv=8) under other tile, warp and stage counts and split plans,
beside cuDNN SDPA and the CUDA decode, in the bench's burst timer (issue 14: the H200's GQA rows).

Round 22's tensor-core CUDA decode read the GQA cache at 0.966 of the H200's read ceiling with
256 blocks of 4 warps in one split (2 blocks an SM, each warp streaming its own 16-row tiles), where
the Triton kernels sit at 0.93-0.95 in split_plan's 3 splits of 64-key tiles, 4 warps, 3 stages. This
asks whether larger programs (128-key tiles, 8 warps) or other plans close that gap. Each entry is
checked against float64 first (one that fails is reported and dropped), then timed in
alternating rounds. Measurement only: rooflint's
launch parameters are unchanged. Writes decode-triton-knobs.csv under $OUT.

    python3 scripts/device/decode_triton_knobs.py [--rounds 3]
"""

from __future__ import annotations

import argparse

import torch
from decode_triton_plans import kernel_entries
from side_by_side import check_and_burst, gpu_timing_setup

from rooflint.kernels import decode_attention as da
from rooflint.kernels import sm_count

# (splits or None for split_plan, BLOCK_N, num_warps, num_stages)
KNOBS = (
    (None, 64, 4, 3),  # what the variants run
    (None, 64, 4, 4),
    (None, 64, 8, 3),
    (None, 128, 8, 3),
    (None, 128, 8, 2),
    (1, 128, 8, 3),
    (2, 128, 8, 3),
    (2, 64, 4, 3),
    (4, 64, 4, 3),
)


def entries_for(family, case) -> dict:
    """label -> zero-argument call: cuDNN SDPA, the CUDA decode and both Triton kernels per knob set."""
    q, k = case["q"], case["k"]
    b, h_kv, c = q.shape[0], k.shape[1], k.shape[2]
    paged = da.paged_copy(k, case["v"], torch.Generator().manual_seed(0))
    entries = {name: family.variants[name].build(case) for name in ("sdpa_cudnn", "cuda")}
    sms = sm_count(q.device, on_cpu=132)
    for splits, block_n, warps, stages in KNOBS:
        plan = da.split_plan(b, h_kv, c, sms) if splits is None else da._chunked(c, splits, 64)
        name = f"{plan} n{block_n} w{warps} s{stages}"
        entries |= kernel_entries(case, paged, name, plan, block_n=block_n, num_warps=warps, num_stages=stages)
    return entries


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    family, device, sampler, l2, path = gpu_timing_setup("decode_attention", "decode-triton-knobs.csv")
    rows = []
    for _, params in family.cases("large"):
        if params["h_kv"] == params["h"]:
            continue  # GQA only: MHA reads at the ceiling
        case = family.build_case("large", params, "bf16", device)
        # a config that fails the check is reported and dropped, not fatal
        check_and_burst(entries_for(family, case), case, args.rounds, l2, sampler, path, rows, drop_failures=True)


if __name__ == "__main__":
    main()
