"""Read what `rooflint lint` checks: rooflint's results files, or a plain CSV of published numbers.

The plain format (docs/lint.md) is the least a benchmark table needs to be checkable: a kernel
name, the GPU, a time or an achieved rate, the work (FLOPs and/or bytes), and the unit and
precision the FLOPs claim to run on. Each plain row becomes a ResultRow, so both formats go
through the same rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rooflint.core.errors import UserError
from rooflint.core.specs import CUDA_PRECISIONS, TENSOR_PRECISIONS
from rooflint.outputs.results import FAILED, OK, ResultRow, read_results, rows_from_frame

PLAIN_REQUIRED = ("kernel",)
PLAIN_MEASURES = ("time_ms", "time_us", "achieved_tflops", "achieved_gbps")
PLAIN_NUMBERS = PLAIN_MEASURES + ("flops", "bytes", "p20_ms", "p80_ms", "measured_dram_bytes", "l2_bytes")
PLAIN_COLUMNS = PLAIN_REQUIRED + ("gpu", "precision", "compute_unit", "dtype", "correct") + PLAIN_NUMBERS
UNITS = ("tensor", "cuda")


@dataclass
class LintInput:
    rows: list[ResultRow]
    measured_dram_bytes: list[float]  # per row; NaN where no counters were collected
    plain: bool


def read_lint_input(path: Path | str) -> LintInput:
    path = Path(path)
    if not path.exists():
        raise UserError(f"results file {path} does not exist")
    if path.is_dir():
        raise UserError(f"{path} is a directory; pass its results.csv")
    try:
        head = pd.read_csv(path, nrows=0) if path.suffix != ".json" else None
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as error:
        raise UserError(f"{path} is not a CSV file: {str(error).splitlines()[0]}") from None
    if head is not None and "kernel" in head.columns and "family" not in head.columns:
        return _read_plain(path)
    frame = read_results(path)
    return LintInput(rows_from_frame(frame), _numbers(frame, "measured_dram_bytes"), plain=False)


def _numbers(frame: pd.DataFrame, column: str) -> list[float]:
    if column not in frame.columns:
        return [math.nan] * len(frame)
    return [float(v) for v in pd.to_numeric(frame[column], errors="coerce")]


def _read_plain(path: Path) -> LintInput:
    try:
        frame = pd.read_csv(path, keep_default_na=False, na_values=["", "nan", "NaN"], skipinitialspace=True)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as error:
        raise UserError(f"{path} is not a CSV file: {str(error).splitlines()[0]}") from None
    frame.columns = [str(c).strip().lower() for c in frame.columns]
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
            frame[column] = numbers
    rows = [_plain_row(path, i + 2, record) for i, record in enumerate(frame.to_dict("records"))]
    return LintInput(rows, _numbers(frame, "measured_dram_bytes"), plain=True)


def _text(record: dict, name: str) -> str:
    value = record.get(name)
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value).strip()


def _num(record: dict, name: str) -> float:
    value = record.get(name)
    return math.nan if value is None else float(value)


def _plain_row(path: Path, line: int, record: dict) -> ResultRow:
    unit = _text(record, "compute_unit").lower()
    precision = _text(record, "precision").lower()
    flops, nbytes = _num(record, "flops"), _num(record, "bytes")
    claims_flops = math.isfinite(flops) or math.isfinite(_num(record, "achieved_tflops"))
    if claims_flops and unit not in UNITS:
        raise UserError(f"{path} line {line}: compute_unit {unit!r} must be one of {', '.join(UNITS)} for a FLOP count")
    valid = TENSOR_PRECISIONS if unit == "tensor" else CUDA_PRECISIONS
    if claims_flops and precision not in valid:
        raise UserError(f"{path} line {line}: precision {precision!r} for {unit} must be one of {', '.join(valid)}")
    time_ms = _num(record, "time_ms")
    if not math.isfinite(time_ms) and math.isfinite(_num(record, "time_us")):
        time_ms = _num(record, "time_us") / 1e3
    correct = _text(record, "correct").lower()
    failed = correct in ("false", "0", "no", "failed")
    flops = flops if math.isfinite(flops) else 0.0
    return ResultRow(
        family=_text(record, "kernel"),
        variant="",
        kind="",
        dtype=_text(record, "dtype") or precision,
        size="",
        shape="",
        status=FAILED if failed else OK,
        message="marked correct=false in the file" if failed else "",
        median_ms=time_ms,
        p20_ms=_num(record, "p20_ms"),
        p80_ms=_num(record, "p80_ms"),
        tensor_flops=flops if unit == "tensor" else 0.0,
        cuda_flops=flops if unit != "tensor" else 0.0,
        ideal_bytes=nbytes if math.isfinite(nbytes) else math.nan,
        compute_unit=unit,
        precision=precision,
        achieved_tflops=_num(record, "achieved_tflops"),
        achieved_gbps=_num(record, "achieved_gbps"),
        gpu=_text(record, "gpu"),
        l2_bytes=int(_num(record, "l2_bytes")) if math.isfinite(_num(record, "l2_bytes")) else 0,
    )


def read_counters(path: Path | str) -> dict[tuple[str, str, str, str], float]:
    """measured_dram_bytes per (family, variant, dtype, shape) from a `rooflint profile --ncu` CSV."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"counters file {path} does not exist")
    try:
        frame = pd.read_csv(path, keep_default_na=False, na_values=["", "nan", "NaN"])
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as error:
        raise UserError(f"{path} is not a CSV file: {str(error).splitlines()[0]}") from None
    needed = ("family", "variant", "dtype", "shape", "measured_dram_bytes")
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise UserError(f"{path} is not a rooflint profile CSV: missing columns {', '.join(missing)}")
    values = pd.to_numeric(frame["measured_dram_bytes"], errors="coerce")
    return {
        (str(r.family), str(r.variant), str(r.dtype), str(r.shape)): float(v)
        for r, v in zip(frame.itertuples(index=False), values)
    }
