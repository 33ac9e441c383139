"""The Triton Hopper attention's launch configs, warp-specialized ones included, each in its own
child process with a time limit, so a config that hangs (or compiles for minutes) costs only its own
row. Each child checks its config against float64 at a ragged N (both masks), then times it beside
cuDNN SDPA with alternating do_bench rounds. Writes configs.csv under $OUT.

    python3 scripts/device/attention_triton_configs.py [--limit-s 120] [--heads 128,64] [--match ' dd']
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# (B, H, N, causal) per head dim: the shapes of `bench attention --size large`.
CASES = {
    128: [(4, 32, 4096, False), (4, 32, 4096, True), (1, 32, 16384, True)],
    64: [(4, 64, 4096, False), (4, 64, 4096, True)],
    256: [(4, 16, 4096, False), (4, 16, 4096, True)],
}
ROUNDS = 5


def child(d: int, index: int) -> None:
    """Runs one config (SWEEP_CANDIDATES[d][index]); prints one JSON line per shape."""
    import functools
    import statistics

    import torch
    import torch.nn.functional as F
    from side_by_side import check_entries, time_rounds
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from rooflint.core.registry import get_family
    from rooflint.kernels import _attention_hopper as ah

    cfg = ah.SWEEP_CANDIDATES[d][index]
    family = get_family("attention")
    for b, h, n, causal in CASES[d]:
        started = time.time()
        params = {"B": 1, "H": 2, "N": 777, "D": d, "causal": causal}
        case = family.build_case("custom", params, "bf16", torch.device("cuda"), seed=7)
        ragged = ah.prepare(case["q"], case["k"], case["v"], causal, config=cfg)
        checks = check_entries(family, "bf16", {"ragged": ragged}, family.reference(case.inputs, params), cfg.label)
        compile_s = time.time() - started
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        entries = {
            "cudnn": functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal),
            cfg.label: ah.prepare(q, k, v, causal, config=cfg),
        }
        times = time_rounds(entries, ROUNDS, lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION))
        flops = 4 * b * h * n * n * d / (2 if causal else 1)
        cudnn, ours = (statistics.median(times[key]) for key in entries)
        row = {
            "d": d, "n": n, "causal": causal, "config": cfg.label, "status": "ok", "ms": ours,
            "tflops": flops / ours / 1e9, "cudnn_tflops": flops / cudnn / 1e9, "x_cudnn": cudnn / ours,
            "check": checks["ragged"], "first_call_s": round(compile_s, 1),
        }  # fmt: skip
        print("ROW " + json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit-s", type=float, default=120.0, help="time limit per config (both masks)")
    parser.add_argument("--heads", default="128,64")
    parser.add_argument("--match", default="", help="only the configs whose label contains this")
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    from side_by_side import run_child, write_rows

    from rooflint.kernels import _attention_hopper as ah

    out_dir = Path(os.environ.get("OUT", "/tmp/attention-configs"))
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for d in (int(x) for x in args.heads.split(",")):
        for index, cfg in enumerate(ah.SWEEP_CANDIDATES[d]):
            if args.match not in cfg.label:
                continue
            command = [sys.executable, __file__, "--child", str(d), str(index)]
            rows += run_child(command, args.limit_s, {"d": d, "config": cfg.label})
    write_rows(out_dir / "configs.csv", rows)


if __name__ == "__main__":
    main()
