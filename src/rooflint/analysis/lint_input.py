"""Read what `rooflint lint` checks: rooflint's results files, or a plain CSV of published numbers.

The plain format (docs/lint.md) is the least a benchmark table needs to be checkable: a kernel
name, the GPU, a time or an achieved rate, the work (FLOPs and/or bytes), and the unit and
precision the FLOPs claim to run on. Each plain row becomes a ResultRow, so both formats go
through the same rules. Other tables' names for the compute-unit column and its values (`unit`,
`tensor_core`, `simt` ...) are read as aliases, listed in docs/lint.md.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rooflint.core.errors import UserError
from rooflint.core.fmt import number, text
from rooflint.core.paths import existing_file
from rooflint.core.specs import CUDA_PRECISIONS, TENSOR_PRECISIONS
from rooflint.outputs.result_file import check_table, file_text
from rooflint.outputs.results import FAILED, OK, ResultRow, gpu_name, read_results, rows_from_frame

PLAIN_REQUIRED = ("kernel",)
PLAIN_MEASURES = ("time_ms", "time_us", "achieved_tflops", "achieved_gbps")
PLAIN_NUMBERS = PLAIN_MEASURES + ("flops", "bytes", "p20_ms", "p80_ms", "measured_dram_bytes", "l2_bytes")
PLAIN_COLUMNS = PLAIN_REQUIRED + ("gpu", "precision", "compute_unit", "dtype", "correct") + PLAIN_NUMBERS
# The compute units a FLOP count runs on, and the names other tables give them (compared after
# lower-casing, with '-' and ' ' read as '_'). Precisions (fp32, bf16) are not units: a column
# saying fp32 does not say whether tensor or CUDA cores did the work, so it is not an alias.
COMPUTE_UNITS = ("tensor", "cuda")
COMPUTE_UNIT_ALIASES = {
    "tensor": ("tensor_core", "tensor_cores", "tensorcore", "tensorcores", "tc", "mma", "wgmma"),
    "cuda": ("cuda_core", "cuda_cores", "cudacore", "cudacores", "simt", "fma", "ffma"),
}
# Headers other tables use for the compute-unit column, in the order one is chosen when several exist.
COMPUTE_UNIT_COLUMNS = ("compute_unit", "unit", "engine", "pipe")
# The values of the `correct` column: empty (not stated) passes.
CORRECT_TRUE = ("true", "1", "yes", "passed", "")
CORRECT_FALSE = ("false", "0", "no", "failed")
_UNIT_OF = {name: unit for unit in COMPUTE_UNITS for name in (unit,) + COMPUTE_UNIT_ALIASES[unit]}


@dataclass
class LintInput:
    rows: list[ResultRow]
    measured_dram_bytes: list[float]  # per row; NaN where no counters were collected
    plain: bool


def read_lint_input(path: Path | str) -> LintInput:
    path = existing_file(path, "results file", "results.csv")
    # Read once: a pipe (`rooflint lint <(git show main:out/results.csv)`, /dev/stdin) gives its bytes
    # to one reader only, and the header read to tell the formats apart left the reader an empty file.
    text = file_text(path)
    if path.suffix.lower() != ".json" and _plain_header(text):
        return _read_plain(path, text)
    frame = read_results(path, text)
    return LintInput(rows_from_frame(frame), _numbers(frame, "measured_dram_bytes"), plain=False)


def _plain_header(text: str) -> bool:
    """Whether the first line is a plain table's header: `kernel` and no `family`, in any case and
    spacing, as the plain reader reads its columns (docs/lint.md: "Kernel,GPU,Time_ms" is one)."""
    first = text.splitlines()[0] if text.strip() else ""
    try:
        names = {cell.strip().lower() for cell in next(csv.reader([first]), [])}
    except csv.Error:
        return False  # the results reader says what is wrong with the file
    return "kernel" in names and "family" not in names


def _numbers(frame: pd.DataFrame, column: str) -> list[float]:
    if column not in frame.columns:
        return [math.nan] * len(frame)
    return [float(v) for v in pd.to_numeric(frame[column], errors="coerce")]


def _read_plain(path: Path, text: str) -> LintInput:
    check_table(path, PLAIN_REQUIRED, text)  # ragged, cut short, a second header: refused as for results files
    try:
        # Cells as text (numbers are converted below): a `correct` column of 1, 0 and empty cells
        # would otherwise be read as floats, its 0.0 matching no word for false.
        frame = pd.read_csv(
            io.StringIO(text), keep_default_na=False, na_values=["", "nan", "NaN"], skipinitialspace=True, dtype=str
        )
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as error:
        raise UserError(f"{path} is not a CSV file: {str(error).splitlines()[0]}") from None
    frame.columns = [str(c).strip().lower() for c in frame.columns]
    unit_column = next((c for c in COMPUTE_UNIT_COLUMNS if c in frame.columns), "compute_unit")
    if not any(c in frame.columns for c in PLAIN_MEASURES):
        raise UserError(
            f"{path}: a plain lint CSV needs one of the columns {', '.join(PLAIN_MEASURES)} (see docs/lint.md)"
        )
    if not any(c in frame.columns for c in ("flops", "bytes", "achieved_tflops", "achieved_gbps")):
        raise UserError(
            f"{path}: a plain lint CSV needs flops or bytes (or an achieved rate) to judge (see docs/lint.md)"
        )
    for column in PLAIN_NUMBERS:
        if column in frame.columns:
            numbers = pd.to_numeric(frame[column], errors="coerce")
            bad = frame[column].notna() & numbers.isna()
            if bad.any():
                line = int(bad.idxmax()) + 2  # header is line 1
                raise UserError(f"{path} line {line}: {column} {frame[column][bad.idxmax()]!r} is not a number")
            infinite = numbers.abs() == math.inf
            if infinite.any():
                where = infinite.idxmax()
                raise UserError(f"{path} line {int(where) + 2}: {column} {numbers[where]} is not a finite number")
            negative = numbers < 0
            if negative.any():
                where = negative.idxmax()
                valid = "a time above 0" if column.startswith("time_") else "a number >= 0"
                line = int(where) + 2  # the header is line 1
                raise UserError(f"{path} line {line}: {column} {numbers[where]:g} is negative; valid: {valid}")
            frame[column] = numbers
    rows = [_plain_row(path, i + 2, record, unit_column) for i, record in enumerate(frame.to_dict("records"))]
    return LintInput(rows, _numbers(frame, "measured_dram_bytes"), plain=True)


def compute_unit(value: str) -> str:
    """The compute unit a table's value names ("Tensor Core", "cuda-core", "simt" ...), or "" if none."""
    return _UNIT_OF.get(value.strip().lower().replace("-", "_").replace(" ", "_"), "")


def _valid_units() -> str:
    return "; ".join(f"{unit} (or {', '.join(COMPUTE_UNIT_ALIASES[unit])})" for unit in COMPUTE_UNITS)


def _plain_row(path: Path, line: int, record: dict, unit_column: str = "compute_unit") -> ResultRow:
    def num(name: str) -> float:
        return number(record.get(name))

    given = text(record.get(unit_column))
    unit = compute_unit(given)
    precision = text(record.get("precision")).lower()
    flops, nbytes = num("flops"), num("bytes")
    claims_flops = math.isfinite(flops) or math.isfinite(num("achieved_tflops"))
    if claims_flops and not unit:
        raise UserError(
            f"{path} line {line}: {unit_column} {given!r} is not a compute unit for a FLOP count; "
            f"valid: {_valid_units()}"
        )
    valid = TENSOR_PRECISIONS if unit == "tensor" else CUDA_PRECISIONS
    if claims_flops and precision not in valid:
        raise UserError(f"{path} line {line}: precision {precision!r} for {unit} must be one of {', '.join(valid)}")
    time_ms, time_us = num("time_ms"), num("time_us")
    if math.isfinite(time_ms) and math.isfinite(time_us) and not math.isclose(time_ms, time_us / 1e3, rel_tol=0.01):
        # time_ms was read and time_us ignored: a table whose two columns disagree (one of them in the
        # wrong unit) was judged on whichever came first, with nothing said.
        raise UserError(
            f"{path} line {line}: time_ms {time_ms:g} and time_us {time_us:g} disagree ({time_ms:g} ms against "
            f"{time_us / 1e3:g} ms); valid: one of them, or both giving the same time"
        )
    if not math.isfinite(time_ms) and math.isfinite(time_us):
        time_ms = time_us / 1e3
    if time_ms == 0:
        raise UserError(f"{path} line {line}: time 0 is not a measured time; valid: a time above 0")
    p20, p80 = num("p20_ms"), num("p80_ms")
    # As results files are (outputs/result_file.py): a spread that is not one, or a median outside its
    # own spread, read as a negative or nonsensical p20-p80 width and linted clean.
    if p20 > p80:  # NaN (not given) compares false
        raise UserError(
            f"{path} line {line}: p20_ms {p20:g} is above p80_ms {p80:g}; a 20th percentile is at most the 80th"
        )
    if time_ms < p20 or time_ms > p80:
        raise UserError(
            f"{path} line {line}: the time {time_ms:g} ms is outside [p20_ms {p20:g}, p80_ms {p80:g}]; "
            "a median lies between the 20th and 80th percentiles of its samples"
        )
    correct = text(record.get("correct")).strip().lower()
    if correct not in CORRECT_TRUE + CORRECT_FALSE:  # "fail" or "x" read as passing would hide a wrong kernel
        valid = ", ".join(v for v in CORRECT_TRUE + CORRECT_FALSE if v)
        raise UserError(f"{path} line {line}: correct {correct!r} is not true or false; valid: {valid}, or empty")
    failed = correct in CORRECT_FALSE
    rate_given = math.isfinite(num("achieved_tflops")) or math.isfinite(num("achieved_gbps"))
    work_given = math.isfinite(flops) or math.isfinite(nbytes)
    if not failed and not rate_given and not (math.isfinite(time_ms) and work_given):
        # No rule could judge it: the file would lint clean with the row unread.
        raise UserError(
            f"{path} line {line}: row {text(record.get('kernel'))!r} has nothing to judge; valid: a time "
            "(time_ms or time_us) with flops or bytes, or an achieved_tflops or achieved_gbps"
        )
    flops = flops if math.isfinite(flops) else 0.0
    return ResultRow(
        family=text(record.get("kernel")),
        variant="",
        kind="",
        dtype=text(record.get("dtype")) or precision,
        size="",
        shape="",
        status=FAILED if failed else OK,
        message="marked correct=false in the file" if failed else "",
        median_ms=time_ms,
        p20_ms=p20,
        p80_ms=p80,
        tensor_flops=flops if unit == "tensor" else 0.0,
        cuda_flops=flops if unit != "tensor" else 0.0,
        ideal_bytes=nbytes if math.isfinite(nbytes) else math.nan,
        compute_unit=unit,
        precision=precision,
        achieved_tflops=num("achieved_tflops"),
        achieved_gbps=num("achieved_gbps"),
        gpu=gpu_name(text(record.get("gpu"))),
        l2_bytes=int(num("l2_bytes")) if math.isfinite(num("l2_bytes")) else 0,
    )


def read_counters(path: Path | str) -> dict[tuple[str, str, str, str], float]:
    """measured_dram_bytes per (family, variant, dtype, shape) from a `rooflint profile --ncu` CSV."""
    path = existing_file(path, "counters file")
    text = file_text(path)  # read once: a pipe read again is empty (read_lint_input)
    try:
        frame = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=["", "nan", "NaN"])
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as error:
        raise UserError(f"{path} is not a CSV file: {str(error).splitlines()[0]}") from None
    needed = ("family", "variant", "dtype", "shape", "measured_dram_bytes")
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise UserError(f"{path} is not a rooflint profile CSV: missing columns {', '.join(missing)}")
    # Cut short, pandas read the last row's cut count (40 of 4098000 bytes) and the cells it lost as
    # empty: the bytes-disagree rule then judged a number ncu never measured.
    check_table(path, needed, text)
    values = pd.to_numeric(frame["measured_dram_bytes"], errors="coerce")
    # Empty or nan is a variant ncu did not measure; anything else must be a count, or the rows it
    # joins would silently lose the bytes-disagree rule (or be judged on a negative or infinite count).
    bad = (frame["measured_dram_bytes"].notna() & values.isna()) | (values < 0) | (values.abs() == math.inf)
    if bad.any():
        where = bad.idxmax()
        raise UserError(
            f"{path} line {int(where) + 2}: measured_dram_bytes {str(frame['measured_dram_bytes'][where])!r} is "
            "not a byte count; valid: a number >= 0, or empty where ncu measured nothing"
        )
    return {
        (str(r.family), str(r.variant), str(r.dtype), str(r.shape)): float(v)
        for r, v in zip(frame.itertuples(index=False), values)
    }
