"""Burst against sustained, side by side, for the compute-bound rows of two rooflint results files.

    python scripts/regime_table.py BURST.csv SUSTAINED.csv > reports/h100/regimes.md

Rows are matched on (family, variant, dtype, shape, gpu); only ok rows whose `bound` is compute in
the burst file are listed. Each side shows its median, achieved TFLOP/s and median SM clock.
"""

from __future__ import annotations

import sys

from rooflint.core.fmt import fmt
from rooflint.outputs.results import OK, read_results

KEY = ["family", "variant", "dtype", "shape", "gpu"]


def main(burst_path: str, sustained_path: str) -> None:
    burst, sustained = read_results(burst_path), read_results(sustained_path)
    burst = burst[(burst["status"] == OK) & (burst["bound"] == "compute")]
    sustained = sustained[sustained["status"] == OK]
    joined = burst.merge(sustained, on=KEY, suffixes=("_b", "_s"))
    print(
        "| family | variant | shape | burst ms | sustained ms | sustained / burst | burst TFLOP/s "
        "| sustained TFLOP/s | burst SM MHz | sustained SM MHz | sustained reasons |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in joined.itertuples():
        ratio = row.median_ms_s / row.median_ms_b
        reasons = row.clock_event_reasons_s if isinstance(row.clock_event_reasons_s, str) else ""
        print(
            f"| {row.family} | {row.variant} | {row.shape} | {fmt(row.median_ms_b, 4)} | {fmt(row.median_ms_s, 4)} "
            f"| {ratio:.3f} | {fmt(row.achieved_tflops_b, 4)} | {fmt(row.achieved_tflops_s, 4)} "
            f"| {fmt(row.sm_clock_mhz_b, 4)} | {fmt(row.sm_clock_mhz_s, 4)} | {reasons or '-'} |"
        )
    missing = len(burst) - len(joined)
    if missing:
        print(f"\n{missing} compute-bound burst rows have no sustained row.")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
