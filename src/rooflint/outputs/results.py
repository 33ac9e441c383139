"""The results schema and the writer that puts each row on disk as soon as it is measured.

Long format: one row per family x variant x dtype x shape, with the GPU, versions and timestamp
on every row, so files from different machines concatenate (Liger-Kernel's convention). The
dataclass field order is the CSV column order; units are in the column names.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooflint.core.errors import UserError
from rooflint.core.paths import replacing, why_not

if TYPE_CHECKING:  # imported where a file is read: a bench's measuring process writes rows and reads none
    import pandas as pd

SCHEMA_VERSION = 2

# status values
OK, FAILED, SKIPPED, OOM, ERROR, CRASHED = "ok", "failed", "skipped", "oom", "error", "crashed"
STATUSES = (OK, FAILED, SKIPPED, OOM, ERROR, CRASHED)
# Rows that make a bench exit 1: a wrong answer or a variant that could not be measured. Skipped rows
# (no GPU, no nvcc here) are not failures of the run.
FAILING_STATUSES = (FAILED, OOM, ERROR, CRASHED)
# The regime column's values: engine.settings.Regime's (it sits above this layer), "" on an untimed row.
REGIMES = ("burst", "sustained")
# The timing_mode column's values ("" on an untimed row): engine/timing.py and graph_timing.py's (CUDA
# events, graph replays, back-to-back batches, a CPU's or a synchronized GPU's wall clock), and a model
# row's (models/rows.py: "profiler", and "profiler_" + its attribution's mode).
TIMING_MODES = (
    "cuda_events",
    "cuda_graph",
    "cuda_events_stream",
    "cuda_wall",
    "cpu_wall",
    "profiler",
    "profiler_device_kernels",
    "profiler_cpu_ranges",
    "profiler_graph_replay_kernels",
)


def not_passed(frame) -> list[tuple[str, str]]:
    """("family/variant dtype shape", status) of each row of a results frame that failed its check,
    errored, ran out of memory or crashed: what every command reading results fails on (a skip is
    no failure)."""
    failing = frame[frame["status"].isin(FAILING_STATUSES)]
    return [(f"{r.family}/{r.variant} {r.dtype} {r.shape}", r.status) for r in failing.itertuples()]


# A row's message carries this when NVML saw another process computing on its GPU while it was
# timed: its SMs were shared, so its time says as little about its code as a throttled clock does.
SHARED_GPU_NOTE = "another process was using the GPU"
# A compute-bound row held at the power cap by its own load (engine/throttle.py): kept, not throttled.
POWER_CAPPED_NOTE = "at its power cap by its own load"


@dataclass
class ResultRow:
    # what was run
    family: str
    variant: str
    kind: str  # eager | eager_unfused | compile | triton | cuda | library
    dtype: str
    size: str  # preset name or "custom"
    shape: str  # "n=268435456" or "B=4,H=32,N=4096,D=128,causal=1"
    status: str  # ok | failed | skipped | oom | error | crashed
    message: str = ""  # why a row is not ok (or backend notes for ok rows)
    # correctness gate
    rel_error: float = math.nan
    tolerance: float = math.nan
    # timing
    timing_mode: str = ""  # cuda_events | cuda_graph | cpu_wall
    l2_flushed: bool = False
    n_samples: int = 0
    median_ms: float = math.nan
    p20_ms: float = math.nan
    p80_ms: float = math.nan
    launch_overhead_ms: float = math.nan  # call time minus CUDA-graph time, where both were measured
    # analytic cost model
    tensor_flops: float = 0.0
    cuda_flops: float = 0.0
    ideal_bytes: float = 0.0  # each input read once, each output written once
    modeled_bytes: float = math.nan  # what this implementation moves, where it declares it
    peak_extra_memory_bytes: float = math.nan  # allocated beyond inputs and outputs
    # roofline
    compute_unit: str = ""  # tensor | cuda: the unit whose time dominates the compute floor
    precision: str = ""  # the precision that unit runs in (bf16, tf32, fp32, ...)
    achieved_tflops: float = math.nan
    achieved_gbps: float = math.nan
    ai_flop_per_byte: float = math.nan
    peak_tflops: float = math.nan  # the compute roof for this row's mix of units
    bandwidth_gbps: float = math.nan
    attainable_tflops: float = math.nan  # min(peak, AI x bandwidth)
    pct_of_roof: float = math.nan  # floor time / measured time, in percent
    bound: str = ""  # memory | compute
    ceiling_source: str = ""  # datasheet | measured
    speedup_vs_eager: float = math.nan
    lint: str = ""  # "severity:rule; ..." from rooflint.analysis.lint
    # where and when
    gpu: str = ""  # spec key, e.g. h100_sxm, or "cpu"
    device_name: str = ""
    device_index: int = -1  # the GPU's nvidia-smi index (which GPU of a --devices run); -1 on CPU
    sm_count: int = 0
    l2_bytes: int = 0
    sm_clock_mhz: float = math.nan
    mem_clock_mhz: float = math.nan
    torch_version: str = ""
    triton_version: str = ""
    cuda_version: str = ""
    rooflint_version: str = ""
    git_commit: str = ""
    timestamp: str = ""
    # Columns added in schema 2 sit after the schema-1 ones, so schema-1 readers by position still work.
    # how the time was taken, and what the GPU did meanwhile (NVML, sampled while the row was timed)
    regime: str = ""  # burst (spin-separated calls, clocks near boost) | sustained (back-to-back, settled)
    sm_clock_min_mhz: float = math.nan  # sm_clock_mhz above is the median over the timed samples
    power_median_w: float = math.nan
    energy_per_call_j: float = math.nan  # NVML total-energy counter over the timed samples / calls
    flop_per_j: float = math.nan
    bytes_per_j: float = math.nan
    clock_event_reasons: str = ""  # NVML clock-event reasons seen while timing, e.g. "sw_power_cap;hw_thermal"
    throttled: bool = False  # median SM clock under 90% of the run's loaded clock, or a thermal/hw slowdown
    throttle_retries: int = 0  # times the row was re-timed after waiting for the GPU to recover
    # the compute roofs, kept apart: the floor is max(bytes/bandwidth, tensor/tensor peak, cuda/cuda peak)
    tensor_peak_tflops: float = math.nan
    cuda_peak_tflops: float = math.nan
    host: str = ""  # the machine that measured the row (fleets run one plan on many hosts)
    # a library row (kind "library"): the third-party distribution it ran and its version
    library: str = ""  # e.g. "liger-kernel"; empty for rooflint's own and PyTorch's variants
    library_version: str = ""
    # a model row (family "model:<config>", rooflint model): its phase and the step's throughput,
    # so they sort, plot and gate like any column; empty (NaN, "") on kernel rows
    phase: str = ""  # prefill | decode | generate
    batch: float = math.nan  # sequences per step (a whole number)
    context: float = math.nan  # keys the last new token sees: prefill T, decode the timed step's cache length
    tokens_per_s: float = math.nan  # op=step rows: tokens produced per second
    floor_ms: float = math.nan  # op=step rows: the phase's roofline floor (models/rows.phase_floor)
    pct_of_floor: float = math.nan  # op=step rows: floor / measured step time, in percent

    def key(self) -> tuple[str, str, str, str, str]:
        return (self.family, self.variant, self.dtype, self.shape, self.gpu)


COLUMNS = [f.name for f in fields(ResultRow)]
_TYPES = {f.name: f.type for f in fields(ResultRow)}


class ResultWriter:
    """Appends rows to results.csv and flushes each one, so an interrupted run loses nothing."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = Path(out_dir)
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self.csv_path = self.out_dir / "results.csv"
            self._file = self.csv_path.open("w", newline="")
        except OSError as error:
            why = why_not(self.out_dir / "results.csv", error)
            raise UserError(f"cannot write to output directory {self.out_dir}: {why}") from None
        self._writer = csv.DictWriter(self._file, fieldnames=COLUMNS)
        self._writer.writeheader()
        self._file.flush()
        self.rows: list[ResultRow] = []

    def append(self, row: ResultRow) -> None:
        self.rows.append(row)
        self._writer.writerow(record_of(row))
        self._file.flush()

    def reorder(self, key: Callable[[ResultRow], Any]) -> None:
        """Sort the rows by ``key`` and write results.csv again (with any field changed since a row
        was appended), through a temporary file renamed into place: stopped midway, the file keeps
        every row as it was. A fleet's rows land as they finish and end in plan order."""
        self.rows.sort(key=key)
        with replacing(self.csv_path, newline="") as handle:
            rewriter = csv.DictWriter(handle, fieldnames=COLUMNS)
            rewriter.writeheader()
            rewriter.writerows(record_of(row) for row in self.rows)
            self._file.close()
        self._file = self.csv_path.open("a", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=COLUMNS)

    def close(self, run: dict[str, Any] | None = None) -> None:
        self._file.close()
        write_json(self.rows, self.out_dir / "results.json", run)


def write_json(
    rows: Iterable[ResultRow],
    path: Path,
    run: dict[str, Any] | None = None,
    extra: Sequence[dict[str, str]] = (),
) -> None:
    """``run``: a bench's run record (engine/run_clock.run_record: wall time, phases, caches), kept
    beside the rows; readers of the rows ignore it. ``extra``: see with_extra."""
    records = [json_safe(record) for record in with_extra(rows, extra)]
    with replacing(path) as handle:  # whole or not at all: an interrupted write keeps the last one
        handle.write(json_text(records, run))


def json_text(records: list[dict[str, Any]], run: dict[str, Any] | None = None) -> str:
    """results.json's text: one row a line (a diff of two runs shows the rows that changed; indented,
    a row's 60 fields took a line each and a reference's file a fifth more bytes), the run record
    indented below them."""
    rows = ",\n".join(json.dumps(record, separators=(",", ":")) for record in records)
    text = f'{{"schema_version": {SCHEMA_VERSION},\n"rows": [\n{rows}\n]'
    if run is not None:
        text += ',\n"run": ' + json.dumps(run, indent=1)
    return text + "\n}\n"


def with_extra(rows: Iterable[Any], extra: Sequence[dict[str, str]] = ()) -> list[dict[str, Any]]:
    """Each dataclass row as a record, followed by its cells of ``extra`` (one dict per row, or none):
    the columns of a results file that rooflint does not know (a `measured_dram_bytes` column from
    `rooflint profile --ncu`, a note of the user's), which the reader keeps as text and merge writes
    back, so that a merged file holds every cell its inputs held."""
    records = [record_of(row) for row in rows]
    for record, cells in zip(records, extra):
        record.update({name: value for name, value in cells.items() if name not in record})
    return records


def record_of(row: Any) -> dict[str, Any]:
    """A dataclass row's fields by name, as dataclasses.asdict gives them for rows of scalars (text,
    numbers, flags), without its deep copy of each value: that copy was most of the time spent
    writing a file of many rows (20000 rows, 4 s of asdict)."""
    return {item.name: getattr(row, item.name) for item in fields(row)}


def json_safe(record: dict[str, Any]) -> dict[str, Any]:
    """NaN and infinity become null: JSON has no spelling for them."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


def read_results(path: Path | str, text: str | None = None) -> pd.DataFrame:
    """Read a results.csv or results.json written by rooflint, with one clear error if it is not one
    (the strict reader, outputs/result_file.py: every command that takes results reads through it).
    ``text``: the file's, where the caller has read it already (result_file.file_text)."""
    from rooflint.outputs.result_file import Schema, read_result_file

    schema = Schema(dict(_TYPES), STATUSES, OK, tuple(NA_VALUES), FAILED, REGIMES, SCHEMA_VERSION, TIMING_MODES)
    frame = read_result_file(path, schema, text)
    frame["gpu"] = frame["gpu"].map(gpu_name)
    return frame


CPU_GPU = "cpu"  # a CPU run's gpu cell: the key of its measured spec (engine/ceilings.py), stamped on each row


def gpu_name(name: str) -> str:
    """A gpu cell as the readers compare it: the CPU in the one spelling rooflint writes, whatever its
    case or padding; any other name as written (merge.by_gpu_key resolves a GPU's names to its key).
    A hand-edited or another tool's "CPU" beside rooflint's "cpu" was a second GPU to every reader:
    two report sections and roofline plots, merge keeping both rows of a key, lint's wrong_gpu error."""
    return CPU_GPU if name.strip().lower() == CPU_GPU else name


def row_from_record(record: dict[str, Any]) -> ResultRow:
    """A ResultRow from a CSV/JSON record: missing or NaN values take the field's default."""
    return from_record(ResultRow, record)


def rows_from_frame(frame: pd.DataFrame) -> list[ResultRow]:
    return [row_from_record(record) for record in frame.to_dict("records")]


# ------------------------------------------------------------------------- one typed CSV codec
# Every CSV rooflint writes from a dataclass (result rows; `rooflint profile --ncu` rows) reads back
# through here: rooflint's empty-cell convention, then each cell decoded by its field's declared type.

NA_VALUES = ["", "nan", "NaN"]  # what rooflint writes for "not measured"; "NA", "null" stay text


def from_record(cls: type, record: dict[str, Any]) -> Any:
    """A ``cls`` instance from a CSV/JSON record: missing or NaN text is "", a missing int takes the
    field's default (else 0), a missing float is NaN, a bool is true for "true" or "1"."""
    values = {}
    for item in fields(cls):
        value = record.get(item.name)
        missing = value is None or (isinstance(value, float) and math.isnan(value))
        if item.type == "str":
            values[item.name] = "" if missing else str(value)
        elif item.type == "bool":
            values[item.name] = str(value).lower() in ("true", "1")
        elif item.type == "int":
            default = 0 if item.default is dataclasses.MISSING else item.default
            values[item.name] = default if missing else int(value)
        else:
            values[item.name] = math.nan if missing else float(value)
    return cls(**values)


def read_typed_csv(path: Path | str, cls: type, what: str) -> list[Any]:
    """Every row of a CSV written from dataclass ``cls``, or one clear error naming ``what`` it should be."""
    import pandas as pd

    from rooflint.core.paths import existing_file

    path = existing_file(path, what)
    try:
        frame = pd.read_csv(path, keep_default_na=False, na_values=NA_VALUES)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as error:
        raise UserError(f"{path} is not a {what}: {str(error).splitlines()[0]}") from None
    # A column added later with a default (an older file has none) reads as that default.
    required = [item for item in fields(cls) if item.default is dataclasses.MISSING]
    missing = [item.name for item in required if item.name not in frame.columns]
    if missing:
        raise UserError(f"{path} is not a {what}: missing columns {', '.join(missing)}")
    return [from_record(cls, record) for record in frame.to_dict("records")]


def write_typed_csv(rows: Iterable[Any], path: Path | str, cls: type, extra: Sequence[dict[str, str]] = ()) -> Path:
    """Write dataclass rows as CSV, one column per field of ``cls`` in field order, then the columns
    of ``extra`` (see with_extra)."""
    path = Path(path)
    names = [item.name for item in fields(cls)]
    names += [name for name in dict.fromkeys(name for record in extra for name in record) if name not in names]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(path, newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=names)
            writer.writeheader()
            writer.writerows(with_extra(rows, extra))
    except OSError as error:
        raise UserError(f"cannot write {path}: {why_not(path, error)}") from None
    return path
