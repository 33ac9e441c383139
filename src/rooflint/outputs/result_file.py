"""The one strict reader of rooflint results files (results.csv, results.json).

lint, report, compare, merge and roofline all read through here, so a file one of them refuses,
every one refuses, with the same line. A results file decides CI verdicts and roofline points, so
anything that could be misread is refused with one line naming the file, the line and the field:

- a time that is not a number, or is not finite (NaN, inf, 1e300 on an ok row): a rate, % of roof
  or comparison made from it would be nonsense;
- any other number that is infinite (but a failed row's rel_error): a rate or a count made from it;
  or finite but past any count, cost, rate or clock (1e308 TFLOP/s): the report's axes around it
  overflow to inf;
- a negative count, cost, rate, clock or ceiling, and an ok row whose p20 is above its p80, whose
  median is outside [p20, p80], or whose rel_error is above its tolerance;
- an ok row whose achieved_gbps, achieved_tflops or ai_flop_per_byte disagrees, beyond rounding, with
  its own bytes, FLOPs and median time: a report showed the cell as measured;
- a row with more or fewer fields than the header (two writers interleaved, a comma typed into a
  cell): its values would land in the wrong columns;
- the header repeated as a data row (two files concatenated with `cat`);
- a status, regime or timing mode rooflint does not write, and an empty family, variant or dtype (every row
  rooflint writes names them: without them a row reads as a nameless table row, and joins or dedupes
  on nothing);
- a last line without its line end (a copy or a run cut short), whose last cell may be cut.

Allowed, because they cannot shift a value: columns rooflint does not know (kept as text), columns
an older rooflint did not write (their defaults), a UTF-8 byte-order mark, blank lines.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rooflint.core.errors import UserError
from rooflint.core.paths import existing_file, same_file

REQUIRED = ("family", "variant", "dtype", "shape", "status", "median_ms")
NAMED = ("family", "variant", "dtype")  # never empty in a row rooflint writes
TIMES = ("median_ms", "p20_ms", "p80_ms")  # an ok row's timing: finite, and median_ms above 0
# No single kernel call takes a day: a time past it is a corrupted cell (1e300), not a measurement.
MAX_TIME_MS = 86_400_000.0
TRUE, FALSE = ("true", "1"), ("false", "0", "")
# The one number rooflint writes as infinite: the error of an output holding NaN or Inf (a failed
# row). Anywhere else inf is a corrupted cell, and a rate, a log-scale point or a count made from
# it would crash a report or an int() (n_samples inf), so it is refused like an infinite time.
INFINITE_OK = ("rel_error",)
# The numbers that may be below zero: a call time minus its CUDA-graph time (noise can make it
# negative), the GPU index (-1 on a CPU), the memory beyond inputs and outputs (a call may free).
# Any other negative count, cost, rate, clock or ceiling is a corrupted cell: it would draw a point
# left of the roofline or a roof below the floor.
SIGNED = ("launch_overhead_ms", "device_index", "peak_extra_memory_bytes")
# The rates and intensity an ok row stores beside the cost and time they are made from
# (core/roofline.analyse): (column, the cost columns summed, the column it is over, the scale of one
# unit of the column, its unit). report, roofline and lint show and place a row by these, so a cell
# that disagrees with its own row's cost and time (a hand edit, a corrupted cell) is refused as a
# median outside its own spread is: shown as written, it read as a measurement no run made.
DERIVED = (
    ("achieved_gbps", ("ideal_bytes",), "median_ms", 1e6, "GB/s"),
    ("achieved_tflops", ("tensor_flops", "cuda_flops"), "median_ms", 1e9, "TFLOP/s"),
    ("ai_flop_per_byte", ("tensor_flops", "cuda_flops"), "ideal_bytes", 1.0, "FLOP/byte"),
)
# How far a stored value may sit from the one its row's cost and time give: rounding (a file written
# with three or four significant digits, its time rounded too), never another measurement.
DERIVED_TOLERANCE = 0.02
# No count, cost, rate, clock or ceiling comes near it (a whole model's generation is under 1e20
# FLOPs): a number past it is a corrupted cell, and a plot's axes padded around it overflow to inf.
MAX_NUMBER = 1e30


@dataclass(frozen=True)
class Schema:
    """What a results file must hold; outputs/results.py describes rooflint's (``results_schema``)."""

    types: dict[str, str]  # column -> str | float | int | bool, in column order
    statuses: tuple[str, ...]
    ok: str  # the status of a timed row
    na_values: tuple[str, ...]  # how an empty number is written
    failed: str  # the status of a row whose output failed its check: the one row rel_error may be inf
    regimes: tuple[str, ...] = ()  # the regime column's values beside "" (none checked where empty)
    version: int = 0  # the newest results.json schema_version this reader knows (0: none checked)
    timing_modes: tuple[str, ...] = ()  # the timing_mode column's values beside "" (none checked where empty)


def read_result_file(path: Path | str, schema: Schema, text: str | None = None) -> pd.DataFrame:
    """Every row of a rooflint results file, each cell checked against its column's type.

    String columns hold "" where empty, numeric ones NaN; every column of the current schema is
    present (filled with its default where the file predates it). ``text``: the file's text where
    the caller has read it already (file_text), so a pipe is not read twice.
    """
    path = existing_file(path, "results file", "results.csv")
    where = _Where(path)
    text = _text_of(path, where) if text is None else text
    if path.suffix.lower() == ".json":
        records = _json_records(text, where, schema.version)
    else:
        records = _csv_records(text, where, REQUIRED, spelt=tuple(schema.types))
    try:
        return _frame(records, schema)
    except _Refusal as refusal:
        raise UserError(f"{path} {refusal}") from None


def file_text(path: Path) -> str:
    """A results file's (or another table's) text, checked to be UTF-8 text, or one line naming it.

    Read once and handed to the readers: a pipe (`rooflint lint <(git show main:out/results.csv)`,
    /dev/stdin) gives its bytes to the first reader only, and a second read found it empty."""
    return _text_of(path, _Where(path))


def check_table(path: Path, required: tuple[str, ...], text: str | None = None) -> None:
    """The checks of a results CSV that need no schema, for another table lint reads (a plain CSV of
    published numbers): text, one header, every row as wide as it, nothing cut off. ``text``: the
    file's, where already read (file_text)."""
    where = _Where(path)
    _csv_records(_text_of(path, where) if text is None else text, where, required)


def refuse_reading_and_writing(out: Path, inputs: list[Path], option: str = "--out") -> None:
    """Refuse an output path that names a file the command reads (a results or counters file): it
    would be replaced by the report or diff, and the results lost, with nothing said."""
    for source in inputs:
        if same_file(out, Path(source)):
            raise UserError(
                f"{option} {out} is also an input ({source}): writing there would replace a file this "
                "command reads; give another path"
            )


def _text_of(path: Path, where: _Where) -> str:
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (Excel's UTF-8 CSV) is allowed
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        where.fail(f"line {line}", f"byte 0x{raw[error.start]:02x} is not UTF-8 text")
    if "\x00" in text:
        where.fail(f"line {text[: text.index(chr(0))].count(chr(10)) + 1}", "a NUL byte: not a text file")
    return text


class _Where:
    """Names the file in every refusal."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, place: str, why: str) -> None:
        raise UserError(f"{self.path} {place}: {why}".replace("\n", " ")[:400]) from None

    def whole(self, why: str) -> None:
        raise UserError(f"{self.path} is not a rooflint results file: {why}".replace("\n", " ")[:400]) from None


def _csv_records(
    text: str, where: _Where, required: tuple[str, ...], spelt: tuple[str, ...] = ()
) -> list[tuple[str, dict[str, Any]]]:
    """Each data row as (place, {column: cell}). ``required`` are found in any case (a plain table's
    reader lower-cases its header); ``spelt``, a results file's columns, must be named as written."""
    if not text.strip():
        where.whole("it is empty")
    try:
        _header(next(csv.reader([text.splitlines()[0]])), where, required, spelt)  # not a results file: say that first
    except csv.Error as error:
        where.whole(f"not CSV: {error}")
    if not text.endswith(("\n", "\r")):
        # rooflint ends every row it writes with a line end: without one, the last cell may be cut.
        where.fail(
            f"line {text.count(chr(10)) + 1}", "truncated: the last line has no line end (the file was cut short)"
        )
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    records: list[tuple[str, dict[str, Any]]] = []
    header: list[str] | None = None
    end = 0
    try:
        for cells in reader:
            start, end = end + 1, reader.line_num
            if not cells or cells == [""]:
                continue  # a blank line shifts nothing
            if header is None:
                header = _header(cells, where, required, spelt)
                continue
            place = f"line {start}"
            if [c.strip() for c in cells] == header:
                where.fail(place, "the header repeated as a data row (two files joined?); keep one header")
            if len(cells) != len(header):
                where.fail(
                    place,
                    f"{len(cells)} fields where the header has {len(header)} (a ragged row: two writers at once, "
                    "or a stray comma); every row needs one field per column",
                )
            records.append((place, dict(zip(header, cells))))
    except csv.Error as error:
        where.fail(f"line {reader.line_num}", f"not CSV: {error}")
    if header is None:
        where.whole("no header row")
    return records


def _header(cells: list[str], where: _Where, required: tuple[str, ...], spelt: tuple[str, ...] = ()) -> list[str]:
    header = [c.strip() for c in cells]
    missing = [c for c in required if c not in [h.lower() for h in header]]
    if missing:
        where.whole(f"missing columns {', '.join(missing)}")
    # A results file's cells are read by their column's name as rooflint writes it: "Family" was
    # taken as present, then every row refused as having an empty family; "P20_ms" was kept as a
    # column of its own, every row read as having no spread.
    misspelt = [h for h in header if h not in spelt and h.lower() in spelt]
    if misspelt:
        where.fail(
            "line 1", f"column {misspelt[0]!r} is not spelt as rooflint writes it; valid: {misspelt[0].lower()!r}"
        )
    repeated = sorted({c for c in header if header.count(c) > 1})
    if repeated:
        where.fail("line 1", f"column {repeated[0]!r} appears twice in the header")
    return header


def _json_records(text: str, where: _Where, newest: int = 0) -> list[tuple[str, dict[str, Any]]]:
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError) as error:
        where.whole(f"not JSON: {error}")
    rows = payload.get("rows") if isinstance(payload, dict) else None
    if not isinstance(rows, list):
        where.whole('no "rows" list')
    version = payload.get("schema_version")
    if newest and version is not None:
        # A newer rooflint may mean another thing by a column: its rows were read as this schema's.
        # No schema_version at all (a file made by hand) is read as the current one.
        whole = type(version) is int or (type(version) is float and version.is_integer())
        if not whole or not 1 <= version <= newest:
            why = (
                f"newer than this rooflint reads (1 to {newest}); upgrade rooflint to read it"
                if whole and version > newest
                else f"not a schema version; valid: a whole number from 1 to {newest}"
            )
            shown = str(version)[:40] if whole else repr(str(version)[:40])
            raise UserError(f"{where.path} has schema_version {shown}: {why}") from None
    records = []
    for index, record in enumerate(rows):
        place = f"row {index + 1}"
        if not isinstance(record, dict):
            where.fail(place, "not an object")
        missing = [c for c in REQUIRED if c not in record]
        if missing:
            where.fail(place, f"missing {', '.join(missing)}")
        records.append((place, record))
    return records


def _frame(records: list[tuple[str, dict[str, Any]]], schema: Schema) -> pd.DataFrame:
    types = schema.types
    rows = [_check_row(place, record, schema) for place, record in records]
    extra = list(dict.fromkeys(name for _, record in records for name in record if name not in types))
    data = {name: [row[name] for row in rows] for name in types}
    data.update({name: [_text(record.get(name)) for _, record in records] for name in extra})
    frame = pd.DataFrame(data, columns=[*types, *extra])
    for name in types:
        if types[name] in ("float", "int"):
            frame[name] = pd.to_numeric(frame[name])
    return frame


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _check_row(place: str, record: dict[str, Any], schema: Schema) -> dict[str, Any]:
    """One record's cells as typed values; the file's path is added by the caller's UserError."""
    status = _text(record.get("status")).strip()
    if status not in schema.statuses:
        _refuse(place, f"status {status!r} is not one rooflint writes; valid: {', '.join(schema.statuses)}")
    row: dict[str, Any] = {}
    for name, kind in schema.types.items():
        value = record.get(name)
        if kind == "float":
            row[name] = _number(place, name, value, schema.na_values)
        elif kind == "int":
            number = _number(place, name, value, schema.na_values)
            if math.isfinite(number) and number != int(number):
                _refuse(place, f"{name} {value!r} is not a whole number")
            row[name] = number
        elif kind == "bool":
            row[name] = _flag(place, name, value)
        elif isinstance(value, (list, dict)):
            # A JSON list or object is no cell: read as its Python text ("['a']"), a family or shape
            # named by it joined and compared as a name no run ever wrote.
            _refuse(place, f"{name} is a JSON {'list' if isinstance(value, list) else 'object'}; valid: text")
        else:
            row[name] = _text(value)
    row["status"] = status
    if schema.regimes:
        row["regime"] = regime = row["regime"].strip()
        if regime and regime not in schema.regimes:
            # A time is only meaningful with its regime: a report set a "warm" row beside burst ones as
            # a regime of its own, and merge kept both as different measurements of one row.
            valid = ", ".join(schema.regimes)
            _refuse(place, f"regime {regime!r} is not one rooflint writes; valid: {valid}, or empty")
    if schema.timing_modes:
        row["timing_mode"] = mode = row["timing_mode"].strip()
        if mode and mode not in schema.timing_modes:
            # compare lists rows timed two ways as "other timing", never compared: a misspelt mode
            # passed a row three times slower as another method's time.
            valid = ", ".join(schema.timing_modes)
            _refuse(place, f"timing_mode {mode!r} is not one rooflint writes; valid: {valid}, or empty")
    for name in NAMED:
        if not row[name].strip():
            _refuse(place, f"{name} is empty; valid: the name of the {name} the row measured, as bench writes it")
    timed = status == schema.ok
    for name, kind in schema.types.items():
        if timed and name in TIMES:
            continue  # an ok row's times are judged below, with what a time may be
        if kind in ("float", "int") and name not in SIGNED and row[name] < 0:
            _refuse(place, f"{name} {record.get(name)!r} is negative; valid: a number of 0 or more, or empty")
        if kind in ("float", "int") and name not in TIMES + INFINITE_OK and abs(row[name]) > MAX_NUMBER:
            _refuse(
                place, f"{name} {row[name]:g} is past any count or rate; valid: a number under {MAX_NUMBER:g}, or empty"
            )
    for name in INFINITE_OK:
        if math.isinf(row[name]) and status != schema.failed:
            _refuse(
                place,
                f"{name} {row[name]} on a row of status {status}; "
                "valid: a finite number, or empty (inf only on a failed row)",
            )
    if timed and row["rel_error"] > row["tolerance"]:  # NaN (no check recorded) compares false
        # bench keeps a row ok only where its error is within its tolerance. An ok row past it (a
        # hand edit of one cell) passed compare, report and merge while lint failed it.
        _refuse(
            place,
            f"rel_error {row['rel_error']:g} is above tolerance {row['tolerance']:g} on a row of status ok; "
            "a row past its tolerance failed its check (status failed)",
        )
    for name in TIMES:
        _check_time(place, name, row[name], ok=timed)
    if timed and row["p20_ms"] > row["p80_ms"]:  # NaN (no spread recorded) compares false
        _refuse(
            place, f"p20_ms {row['p20_ms']:g} is above p80_ms {row['p80_ms']:g}; a 20th percentile is at most the 80th"
        )
    low, high, median = row["p20_ms"], row["p80_ms"], row["median_ms"]
    if timed and (median < low or median > high):  # a bound not recorded (NaN) compares false: no bound
        # rooflint takes all three from one sorted list of samples. A median outside its own spread
        # (a hand edit of one cell) made compare judge the change by the median and its noise by an
        # interval the median was not in.
        _refuse(
            place,
            f"median_ms {median:g} is outside [p20_ms {low:g}, p80_ms {high:g}]; "
            "a median lies between the 20th and 80th percentiles of its samples",
        )
    if timed and all(name in row for name, *_ in DERIVED):
        _check_derived(place, row)
    return row


def _check_derived(place: str, row: dict[str, Any]) -> None:
    """An ok row's achieved rates and intensity against its own cost and median time (DERIVED)."""
    for name, costs, over, scale, unit in DERIVED:
        stored, amount, by = row[name], sum(row[cost] for cost in costs), row[over]
        if math.isnan(stored) or not math.isfinite(amount) or not math.isfinite(by) or by <= 0:
            # Not recorded (nothing shown), or nothing to check it by: no cost recorded, or no bytes
            # (an intensity without bytes is not defined).
            continue
        expected = amount / by / scale
        if not math.isclose(stored, expected, rel_tol=DERIVED_TOLERANCE):
            _refuse(
                place,
                f"{name} {stored:g} disagrees with its row's {' + '.join(costs)} {amount:g} over {over} {by:g}; "
                f"valid: {expected:.4g} {unit} (within {DERIVED_TOLERANCE:.0%}), or empty",
            )


# A number as a results file spells it (Python's repr, pandas, a spreadsheet): ASCII digits, a point,
# an exponent, or nan/inf.
_DECIMAL = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)", re.ASCII | re.IGNORECASE)


class _Refusal(UserError):
    pass


def _refuse(place: str, why: str) -> None:
    raise _Refusal(f"{place}: {why}")


def _number(place: str, name: str, value: Any, na_values: tuple[str, ...]) -> float:
    if value is None or (isinstance(value, str) and value.strip() in na_values):
        return math.nan
    if isinstance(value, bool):
        _refuse(place, f"{name} {value!r} is not a number")
    if isinstance(value, str) and not _DECIMAL.fullmatch(value.strip()):
        # float() also reads "1_000" as 1000 and "١٢" or "１２" as 12: a cell that reads as another
        # number than the one shown, which no writer of results files spells so.
        _refuse(place, f"{name} {value[:40]!r} is not a number")
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError, OverflowError):
        _refuse(place, f"{name} {str(value)[:40]!r} is not a number")
    if math.isinf(number) and name not in INFINITE_OK:
        if name.endswith("_ms"):
            _refuse(place, f"{name} {number} is not a finite time; valid: a number of ms, or empty")
        _refuse(place, f"{name} {number} is not a finite number; valid: a number, or empty")
    return number


def _flag(place: str, name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    word = _text(value).strip().lower()
    if word in TRUE or word in FALSE:
        return word in TRUE
    _refuse(place, f"{name} {str(value)[:40]!r} is not true or false")
    return False


def _check_time(place: str, name: str, value: float, ok: bool) -> None:
    if not ok:
        return
    if name == "median_ms" and not math.isfinite(value):
        _refuse(place, f"median_ms {value:g} on an ok row; valid: a time above 0 ms")
    if math.isnan(value):
        return  # p20/p80 of an old file or a one-sample row: no spread, not a wrong one
    low_ok = value > 0 if name == "median_ms" else value >= 0
    if not low_ok or value > MAX_TIME_MS:
        valid = "a time above 0 ms" if name == "median_ms" else "a time of 0 ms or more"
        _refuse(place, f"{name} {value:g} on an ok row; valid: {valid} and under a day")
