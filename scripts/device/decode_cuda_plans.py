"""The CUDA decode's two split kernels (decode_attention.cu: CUDA cores, tensor cores) under several
split plans, beside cuDNN SDPA and the Triton kernels, in one process.

For each large shape and each path: wave_plan from that kernel's occupancy (what `cuda` runs) and
fixed split counts (--splits). Each entry is checked against float64 first, then timed in
alternating rounds with the bench's own timer (--timer bench) or triton.testing.do_bench. Writes
decode-plans.csv under $OUT with the path, the plan and the kernel's blocks per SM.

    python3 scripts/device/decode_cuda_plans.py --rounds 3 --splits 1,2,3,4
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
from pathlib import Path

import torch
from side_by_side import bench_timer_ms, check_entries, do_bench_ms, time_rounds, write_csv

from rooflint.core.registry import get_family
from rooflint.engine import cuda_build
from rooflint.kernels import decode_attention as da


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--splits", default="1,2,3,4", help="fixed split counts to time beside wave_plan")
    parser.add_argument("--timer", choices=("bench", "do_bench"), default="bench")
    parser.add_argument("--paths", default="cuda_cores,tensor_cores")
    args = parser.parse_args()
    out_dir = Path(os.environ.get("OUT", "/tmp/decode-plans"))
    out_dir.mkdir(parents=True, exist_ok=True)
    family = get_family("decode_attention")
    library = cuda_build.load(cuda_build.family_source(da.__file__))
    timer = bench_timer_ms if args.timer == "bench" else do_bench_ms
    rows = []
    for _, params in family.cases("large"):
        case = family.build_case("large", params, "bf16", torch.device("cuda"))
        q, k, v = case["q"], case["k"], case["v"]
        h_kv, c = k.shape[1], k.shape[2]
        entries = {name: family.variants[name].build(case) for name in ("eager", "triton", "triton_paged")}
        described = {name: {"path": name, "plan": "", "blocks_per_sm": ""} for name in entries}
        for path in args.paths.split(","):
            per_sm = da.cuda_blocks_per_sm(library, q, h_kv, path)
            plans = {"wave_plan": da.cuda_plan(library, q, h_kv, c, path)}
            plans |= {f"{s} splits": da._chunked(c, int(s), 64) for s in args.splits.split(",")}
            timed = set()
            for name, plan in plans.items():
                if plan in timed:
                    continue  # a fixed count that wave_plan already is
                timed.add(plan)
                label = f"cuda {path} {name} {plan}"
                ws = da.DecodeWorkspace(q, h_kv, c, plan=plan)
                entries[label] = functools.partial(da.cuda_decode, library, q, k, v, ws, path)
                described[label] = {"path": path, "plan": str(plan), "blocks_per_sm": per_sm}
        reference = family.reference(case.inputs, params)
        checks = check_entries(family, "bf16", entries, reference, where=case.shape)
        del reference
        times = time_rounds(entries, args.rounds, timer=timer)
        for label in entries:
            ms = statistics.median(times[label])
            rows.append({"shape": case.shape, "entry": label, **described[label], "ms": ms,
                         "gbps": case.cost.bytes / ms / 1e6, "check": checks[label]})  # fmt: skip
            print(rows[-1], flush=True)
        write_csv(out_dir / "decode-plans.csv", rows)  # after each shape: nothing lost to a later failure


if __name__ == "__main__":
    main()
