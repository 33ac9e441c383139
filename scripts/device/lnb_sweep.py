"""layernorm_backward's Triton rows kernel over launch shapes, side by side in one process.

Programs per SM (1, 2, 3) times num_warps (8, 16) at the large size, each checked against
float64, then timed in alternating rounds of triton.testing.do_bench beside the CUDA variant.
Writes lnb-sweep.csv under $OUT.
"""

from __future__ import annotations

import functools
import os
import statistics
from pathlib import Path

import torch
from side_by_side import check_entries, time_rounds, write_csv

from rooflint.core.registry import get_family
from rooflint.kernels import layernorm_backward as lnb

ROUNDS = 5


def main() -> None:
    out_dir = Path(os.environ.get("OUT", "/tmp/lnb"))
    out_dir.mkdir(parents=True, exist_ok=True)
    family = get_family("layernorm_backward")
    (_, params), *_ = family.cases("large")
    case = family.build_case("large", params, "bf16", torch.device("cuda"))
    reference = family.reference(case.inputs, params)
    args = case["x"], case["dy"], case["weight"], case["mean"], case["rstd"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    entries = {"cuda": family.variants["cuda"].build(case), "triton": family.variants["triton"].build(case)}
    for per_sm in (1, 2, 3):
        for warps in (8, 16):
            out = lnb.allocate(case["x"], case["weight"], per_sm * sms)
            call = functools.partial(lnb.triton_layernorm_backward, *args, num_warps=warps, out=out)
            entries[f"triton p{per_sm} w{warps}"] = call
    checks = check_entries(family, "bf16", entries, reference)
    times = time_rounds(entries, ROUNDS)
    rows = []
    for label in entries:
        ms = statistics.median(times[label])
        rows.append({"entry": label, "ms": ms, "gbps": case.cost.bytes / ms / 1e6, "check": checks[label]})
        print(rows[-1], flush=True)
    write_csv(out_dir / "lnb-sweep.csv", rows)


if __name__ == "__main__":
    main()
