"""One line per profiled kernel launch from Nsight Compute's raw CSV exports.

Reads every <family>-<variant>-raw.csv in DIR, as scripts/device/ncu_limiters.sh writes them
(`ncu -i X.ncu-rep --page raw --csv --print-units base`: a header of metric names, a line of units,
then one row per kernel launch), and prints, one row per launch, in file-name order:

    variant   the file's stem less "-raw" (<family>-<variant>)
    kernel    ncu's kernel name, first 26 characters (enough to tell the templates apart)
    us        duration, gpu__time_duration.sum, in microseconds
    dram_pct  DRAM throughput, % of ncu's DRAM peak (gpu__dram_throughput, the SpeedOfLight figure)
    read_MB   dram__bytes_read.sum, MB (1e6 bytes); write_MB: dram__bytes_write.sum
    occ       achieved occupancy, % of the SM's warp slots (sm__warps_active)
    regs      registers per thread (launch__registers_per_thread)
    stalls    the three largest warp stall reasons, each as a share of the stalled warps per issued
              instruction summed over all reasons but "selected" (a warp that issues is not stalled)
    pipe      the busiest SM pipe (sm__inst_executed_pipe_*) and its utilisation on the busiest SM

A metric a CSV lacks (another ncu version, other sections) prints as '-'. After unpacking the
tarball that ncu_limiters.sh leaves in $OUT:

    python3 scripts/device/ncu_summary.py <unpacked dir> --out summary.txt
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

# Column -> (metric, scale from ncu's base units). --print-units base gives ns and bytes.
SCALARS: dict[str, tuple[str, float]] = {
    "us": ("gpu__time_duration.sum", 1e-3),
    "dram_pct": ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", 1.0),
    "read_MB": ("dram__bytes_read.sum", 1e-6),
    "write_MB": ("dram__bytes_write.sum", 1e-6),
    "occ": ("sm__warps_active.avg.pct_of_peak_sustained_active", 1.0),
    "regs": ("launch__registers_per_thread", 1.0),
}
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")
# .max: the busiest SM's pipe, so one SM saturating a pipe is not averaged away over idle ones.
PIPE = re.compile(r"sm__inst_executed_pipe_(\w+)\.max\.pct_of_peak_sustained_active")
NAME_CHARS = 26


def number(cell: object) -> float | None:
    """ncu's cell as a float: it writes thousands separators ("279,456") and "no data"."""
    try:
        return float(str(cell).replace(",", ""))
    except ValueError:
        return None


def family(row: pd.Series, pattern: re.Pattern[str]) -> dict[str, float]:
    """{name: value} of the row's metrics matching pattern (group 1 is the name), numbers only."""
    found = {m.group(1): number(row[col]) for col in row.index if (m := pattern.fullmatch(col))}
    return {name: value for name, value in found.items() if value is not None and value == value}  # not NaN


def top_stalls(row: pd.Series) -> str:
    stalls = family(row, STALL)
    stalls.pop("selected", None)  # issuing, not stalled: ncu lists it beside the stall reasons
    total = sum(stalls.values())
    if total <= 0:
        return "-"
    top = sorted(stalls.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{name} {100 * value / total:.0f}%" for name, value in top)


def busiest_pipe(row: pd.Series) -> str:
    pipes = family(row, PIPE)
    if not pipes:
        return "-"
    name = max(pipes, key=lambda p: pipes[p])
    return f"{name} {pipes[name]:.0f}%"


def summarize(csv_path: Path) -> list[dict[str, object]]:
    """One dict of cells per kernel launch in one raw CSV; a missing number is None."""
    try:
        # Strings throughout: pandas would otherwise guess per column, and "1,024" is no number to it.
        table = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:  # ncu_limiters.sh writes the CSV even when ncu failed
        print(f"{csv_path.name}: empty, skipped", file=sys.stderr)
        return []
    rows = []
    for _, row in table.iloc[1:].iterrows():  # line 2 is the units
        cells: dict[str, object] = {"variant": csv_path.name.removesuffix("-raw.csv")}
        cells["kernel"] = str(row.get("Kernel Name", "-"))[:NAME_CHARS]
        for column, (metric, scale) in SCALARS.items():
            value = number(row.get(metric))
            cells[column] = None if value is None else round(value * scale, 1)
        cells["stalls"] = top_stalls(row)
        cells["pipe"] = busiest_pipe(row)
        rows.append(cells)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="folder of <family>-<variant>-raw.csv files")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    rows = [cells for path in sorted(args.dir.glob("*-raw.csv")) for cells in summarize(path)]
    if not rows:
        sys.exit(f"no kernel rows in {args.dir}/*-raw.csv")
    # Floats, not preformatted strings, so pandas pads and aligns them as the earlier tables had it;
    # the cast keeps a column that is missing in every CSV numeric (NaN, printed '-', not None).
    frame = pd.DataFrame(rows).astype(dict.fromkeys(SCALARS, float))
    text = frame.to_string(index=False, na_rep="-")
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
