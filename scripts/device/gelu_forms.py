"""The two tanh-GELU forms of the Triton kernels (kernels/_gelu.py) side by side in one process:
ex2 + rcp (`sigmoid`) against tanh.approx (`mufu`), in the gelu and layernorm_gelu kernels at the
large size, beside the family's built-in op. Each entry is checked against float64 first (bf16
and fp16), then timed in alternating do_bench rounds. Writes forms.csv under $OUT.

    python3 scripts/device/gelu_forms.py
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import torch
from side_by_side import check_entries, time_rounds, write_csv

from rooflint.core.registry import get_family
from rooflint.kernels import gelu, layernorm

ROUNDS = 7


def forms(family_name: str, case) -> dict:
    if family_name == "gelu":
        x, bias, scale = case["x"], case["bias"], case["scale"]
        out = torch.empty_like(x)
        return {
            f"triton {form}": lambda m=(form == "mufu"): gelu.triton_gelu(x, bias, scale, out, mufu=m)
            for form in ("sigmoid", "mufu")
        }
    x, w, b = case["x"], case["weight"], case["bias"]
    y = torch.empty_like(x)
    return {
        f"triton {form}": lambda m=(form == "mufu"): layernorm.triton_layernorm(x, w, b, y, gelu=True, mufu=m)
        for form in ("sigmoid", "mufu")
    }


def main() -> None:
    out_dir = Path(os.environ.get("OUT", "/tmp/gelu-forms"))
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for family_name in ("gelu", "layernorm_gelu"):
        family = get_family(family_name)
        for dtype in ("bf16", "fp16"):
            for _, params in family.cases("large"):
                case = family.build_case("large", params, dtype, torch.device("cuda"), seed=0)
                entries = {"eager": family.variants["eager"].build(case), **forms(family_name, case)}
                entries["cuda"] = family.variants["cuda"].build(case)
                checks = check_entries(family, dtype, entries, family.reference(case.inputs, params), family_name)
                if dtype != "bf16":
                    for label, verdict in checks.items():
                        rows.append(
                            {
                                "family": family_name,
                                "dtype": dtype,
                                "shape": case.shape,
                                "entry": label,
                                "check": verdict,
                            }
                        )
                    continue  # fp16: checked only; the timed rows are bf16, as the reference runs
                times = time_rounds(entries, ROUNDS)
                for label in entries:
                    ms = statistics.median(times[label])
                    rows.append(
                        {
                            "family": family_name, "dtype": dtype, "shape": case.shape, "entry": label, "ms": ms,
                            "spread": (max(times[label]) - min(times[label])) / ms,
                            "gbps": case.cost.bytes / ms / 1e6, "check": checks[label],
                        }
                    )  # fmt: skip
                    print(rows[-1], flush=True)
                del entries, case
                torch.cuda.empty_cache()
    columns = ["family", "dtype", "shape", "entry", "ms", "spread", "gbps", "check"]
    write_csv(out_dir / "forms.csv", [{key: row.get(key, "") for key in columns} for row in rows])


if __name__ == "__main__":
    main()
