"""The CUDA decode kernel under two split plans (split_plan's 4-per-SM ceiling and wave_plan
from the kernel's occupancy), beside cuDNN SDPA and triton_paged, in one process.

Each entry is checked against float64 at the large size's shapes, then timed in alternating rounds
of triton.testing.do_bench. Writes decode-plans.csv under $OUT.
"""

from __future__ import annotations

import functools
import os
import statistics
from pathlib import Path

import torch
from side_by_side import check_entries, time_rounds, write_csv

from rooflint.core.registry import get_family
from rooflint.engine import cuda_build
from rooflint.kernels import decode_attention as da
from rooflint.kernels import sm_count

ROUNDS = 5


def main() -> None:
    out_dir = Path(os.environ.get("OUT", "/tmp/decode-plans"))
    out_dir.mkdir(parents=True, exist_ok=True)
    family = get_family("decode_attention")
    library = cuda_build.load(cuda_build.family_source(da.__file__))
    rows = []
    for _, params in family.cases("large"):
        case = family.build_case("large", params, "bf16", torch.device("cuda"))
        q, k, v = case["q"], case["k"], case["v"]
        b, h_kv, c = q.shape[0], k.shape[1], k.shape[2]
        entries = {name: family.variants[name].build(case) for name in ("eager", "triton_paged")}
        plans = {
            "split_plan": da.split_plan(b, h_kv, c, sm_count(q.device, on_cpu=132)),
            "wave_plan": da.cuda_plan(library, q, h_kv, c),
        }
        for name, plan in plans.items():
            ws = da.DecodeWorkspace(q, h_kv, c, plan=plan)
            entries[f"cuda {name} {plan}"] = functools.partial(da.cuda_decode, library, q, k, v, ws)
        reference = family.reference(case.inputs, params)
        checks = check_entries(family, "bf16", entries, reference)
        del reference
        times = time_rounds(entries, ROUNDS)
        for label in entries:
            ms = statistics.median(times[label])
            rows.append({"shape": case.shape, "entry": label, "ms": ms, "gbps": case.cost.bytes / ms / 1e6})
            print(rows[-1], checks[label], flush=True)
    write_csv(out_dir / "decode-plans.csv", rows)


if __name__ == "__main__":
    main()
