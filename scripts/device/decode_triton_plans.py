"""The Triton decode kernels (`triton`, `triton_paged`) under other launch plans, beside cuDNN SDPA,
in the bench's own burst timer (issue 14, the H200's decode MHA).

Round 20's ncu on the H200 (reports/h200/probe-round20/ncu-decode-mha): at MHA (b=32, h=h_kv=32,
8,192 keys, D=128) split_plan gives one split per (sequence, kv head), 1,024 blocks; 3 stages of K/V
tiles take 71.7 KB of shared memory a block, so 3 blocks an SM (18.75% occupancy) and 2.59 waves;
the ideal bytes at 91.8% of the DRAM peak, long-scoreboard stalls: too few loads in flight for the
H200. The references put these rows at 0.91-0.995 of the read ceiling from one H200 to another.

Each entry is checked against float64 at the large size's shapes (MHA and GQA), then timed in
alternating rounds by time_cuda (start state, L2 flushed, NVML clock): per kernel, the plan the
variant uses (split_plan, 3 stages) and it with 2 stages, wave_plan with the block slots 3 stages leave (3 an SM), the
same with 2 stages (their slots from the compiled kernel's shared memory), and 2 and 4 splits by
hand. Writes decode-triton-plans.csv under $OUT (or /tmp/rooflint-sweeps).

    python3 scripts/device/decode_triton_plans.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import functools

import torch
from side_by_side import check_and_burst, gpu_timing_setup

from rooflint.kernels import decode_attention as da
from rooflint.kernels import sm_count

BLOCK_RESERVE = 1024  # shared memory the GPU keeps for each resident block (sm_80 and later)


def slots_for(smem_per_block: int, device) -> int:
    """Blocks resident at once on the GPU when shared memory is what limits them."""
    props = torch.cuda.get_device_properties(device)
    per_sm = props.shared_memory_per_multiprocessor // (smem_per_block + BLOCK_RESERVE)
    return props.multi_processor_count * max(1, per_sm)


def entries_for(family, case) -> dict:
    """label -> zero-argument call, for one case: cuDNN SDPA and each kernel under each plan."""
    q, k, v = case["q"], case["k"], case["v"]
    b, h_kv, c = q.shape[0], k.shape[1], k.shape[2]
    sms = sm_count(q.device, on_cpu=132)
    paged = da.paged_copy(k, v, torch.Generator().manual_seed(0))
    # 3 stages: 71.7 KB a block under ncu (round 20); 2 stages hold one K/V stage less (32 KB at D=128).
    three_stages = 72 * 1024
    two_stages = three_stages - 2 * 64 * q.shape[-1] * q.element_size()
    plans = {
        "split_plan s3": (da.split_plan(b, h_kv, c, sms), 3),
        "split_plan s2": (da.split_plan(b, h_kv, c, sms), 2),
        "wave_plan s3": (da.wave_plan(b, h_kv, c, slots_for(three_stages, q.device)), 3),
        "wave_plan s2": (da.wave_plan(b, h_kv, c, slots_for(two_stages, q.device)), 2),
        "2 splits s3": (da._chunked(c, 2, 64), 3),
        "4 splits s3": (da._chunked(c, 4, 64), 3),
    }
    entries = {"sdpa_cudnn": family.variants["sdpa_cudnn"].build(case)}
    for name, (plan, stages) in plans.items():
        entries |= kernel_entries(case, paged, f"{name} {plan}", plan, num_stages=stages)
    return entries


def kernel_entries(case, paged, name: str, plan: tuple[int, int], **knobs) -> dict:
    """`triton NAME` and `triton_paged NAME`: both Triton decode kernels in ``plan`` (splits, chunk)
    with the launch ``knobs`` (block_n, num_warps, num_stages), each with its own workspace; ``paged``
    is da.paged_copy of the case's cache (pools and block table), made once per case."""
    q, k, v = case["q"], case["k"], case["v"]
    h_kv, c = k.shape[1], k.shape[2]
    pool_k, pool_v, table = paged
    ws, ws_paged = da.DecodeWorkspace(q, h_kv, c, plan=plan), da.DecodeWorkspace(q, h_kv, c, plan=plan)
    return {
        f"triton {name}": functools.partial(da.triton_decode, q, k, v, ws, **knobs),
        f"triton_paged {name}": functools.partial(
            da.triton_paged_decode, q, pool_k, pool_v, table, h_kv, c, ws_paged, **knobs
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    family, device, sampler, l2, path = gpu_timing_setup("decode_attention", "decode-triton-plans.csv")
    rows = []
    for _, params in family.cases("large"):
        case = family.build_case("large", params, "bf16", device)
        check_and_burst(entries_for(family, case), case, args.rounds, l2, sampler, path, rows)


if __name__ == "__main__":
    main()
