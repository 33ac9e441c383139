"""Merge results from several machines or GPUs into one long-format table.

Rows are identified by ResultRow.key(): family, variant, dtype, shape and GPU, and by the regime
they were timed in; the GPU is the spec key its name resolves to (by_gpu_key), so one GPU written
two ways ("h100", "h100_sxm", its device name) is one GPU. Two files that measured the same key in
the same regime (a re-run, or the same machine's results passed twice) would otherwise count twice
in reports and make compare ambiguous, so only the row with the newest timestamp is kept; a burst
run and a sustained run of the same rows both stay (dedupe), and so do an event-timed run and a
`--cuda-graphs` run. Timestamps are ISO 8601 as rooflint
writes them; a row without a readable timestamp loses to one with it, and on a tie the file named
later on the command line wins.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rooflint.core.errors import UserError
from rooflint.core.fmt import counted, text
from rooflint.core.paths import why_not
from rooflint.outputs.results import COLUMNS, ResultRow, read_results, rows_from_frame, write_json, write_typed_csv

# The columns that identify a row, read off ResultRow.key() itself (a row whose every field holds
# its own name keys as the names), so the merge key and the row key can never disagree.
KEY = list(ResultRow(**{name: name for name in COLUMNS}).key())
GRAPHS = " (CUDA graphs)"  # the mark of a row timed by graph replays in its measurement label


def measurement(regime, timing_mode) -> str:
    """How a row was timed, as one label: its regime, marked where CUDA-graph replays timed it ("" for
    a row never timed). Two rows of one key with different labels are two measurements: a graph
    replay's time per call has no launch gap and no L2 flush between calls, an event-timed call both."""
    regime = text(regime)
    return regime + GRAPHS if regime and text(timing_mode) == "cuda_graph" else regime


def regime_of(label: str) -> str:
    return label.removesuffix(GRAPHS)


@dataclass
class Merged:
    frame: pd.DataFrame
    duplicates: list[tuple[str, ...]]  # keys that occurred more than once (one entry per dropped row)
    sources: list[str]

    def describe(self) -> str:
        gpus = sorted(set(self.frame["gpu"].astype(str)))
        text = (
            f"merged {len(self.frame)} rows from {counted(len(self.sources), 'file')} "
            f"(GPUs: {', '.join(g or '?' for g in gpus) or 'none'})"
        )
        if self.duplicates:
            dropped = counted(len(self.duplicates), "duplicate row")
            text += f"; dropped {dropped}, keeping the newest timestamp of each key"
        return text


def dropped_note(count: int) -> str:
    """What report and roofline say of the rows dedupe dropped."""
    return f"{counted(count, 'duplicate row')} dropped, the newest timestamp of each kept"


def dedupe(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[str, ...]]]:
    """Keep one row per key and measurement (regime, and CUDA graphs or not): the newest timestamp,
    then the later position in the frame.

    A number is only meaningful with the regime and the method it was timed with (docs/timing.md),
    so a burst row and a sustained row of one key are two measurements and both stay, as are an
    event-timed row and a graph-timed one. A row that was never timed (a
    skip, a failed check, a crash: no regime) is the key's newest state in every regime: it replaces
    the key's older rows, and a newer timed row replaces it."""
    frame = frame.reset_index(drop=True)
    when = pd.to_datetime(frame["timestamp"].astype(str), utc=True, errors="coerce", format="ISO8601")
    order = pd.DataFrame({"when": when, "position": range(len(frame))})
    # Unreadable timestamps sort first, so any dated row beats them.
    order = order.sort_values(["when", "position"], na_position="first", kind="stable")
    ranked = frame.loc[order.index]
    keys = ranked[KEY].astype(str).itertuples(index=False, name=None)
    empty = pd.Series("", index=ranked.index)
    regimes = map(measurement, ranked.get("regime", empty), ranked.get("timing_mode", empty))
    held: dict[tuple, dict[str, int]] = {}  # key -> {measurement: row index}, oldest to newest
    dropped: list[tuple[str, ...]] = []
    for index, key, regime in zip(ranked.index, keys, regimes):
        rows = held.setdefault(key, {})
        replaced = list(rows) if not regime else [r for r in (regime, "") if r in rows]
        for old in replaced:
            del rows[old]
            dropped.append(key)
        rows[regime] = index
    kept = sorted(index for rows in held.values() for index in rows.values())
    return frame.loc[kept].reset_index(drop=True), dropped


def by_gpu_key(frame: pd.DataFrame, spec_file: Path | str | None = None) -> pd.DataFrame:
    """The frame with each gpu name that get_spec resolves (with ``spec_file``) written as that
    spec's key: "h100", "H100 SXM" and "NVIDIA H100 80GB HBM3" are all h100_sxm.

    merge, report and compare identify a row's GPU by it, as roofline does: a GPU spelled one way in
    one file and another way in the next is one GPU, so its rows dedupe, share one report section
    and join in compare. A name nothing resolves (a GPU outside the table, "cpu", none) stays as
    written, and a name that already is its key is left alone."""
    from rooflint.core.specs import all_specs, spec_key

    all_specs(spec_file)  # a bad spec file is refused here, not read as "no name resolves"
    names = frame["gpu"].map(text)
    keys = {name: (spec_key(name, spec_file) or name) if name else name for name in set(names)}
    return frame.assign(gpu=names.map(keys))


def merge_frames(
    frames: Iterable[pd.DataFrame], sources: Iterable[str] = (), spec_file: Path | str | None = None
) -> Merged:
    frames = list(frames)
    if not frames:
        raise UserError("nothing to merge: give at least one results file")
    # Every column of every input: the schema's, then those rooflint does not know (a
    # `measured_dram_bytes` column that report and lint read), in the order first seen. Only the
    # schema's were kept, so a merged file lost cells that were on disk; a row from a file without
    # such a column holds an empty cell there.
    columns = list(dict.fromkeys([*COLUMNS, *(name for f in frames for name in f.columns)]))
    combined = pd.concat([f.reindex(columns=columns) for f in frames], ignore_index=True)
    combined = by_gpu_key(combined, spec_file)
    kept, dropped = dedupe(combined)
    return Merged(kept, dropped, list(sources))


def merge_files(paths: Iterable[Path | str], spec_file: Path | str | None = None) -> Merged:
    paths = [Path(p) for p in paths]
    return merge_frames([read_results(p) for p in paths], [str(p) for p in paths], spec_file)


def write_frame(frame: pd.DataFrame, path: Path | str) -> Path:
    """Write results in rooflint's own schema: CSV by default, JSON when the name ends in .json."""
    path = Path(path)
    rows = rows_from_frame(frame)
    # The columns rooflint does not know, as the reader kept them (text), after the schema's.
    unknown = [name for name in frame.columns if name not in COLUMNS]
    records = frame[unknown].to_dict("records")
    extra = [{name: text(value, strip=False) for name, value in record.items()} for record in records]
    # Case-blind, as the reader is: merged.JSON written as CSV could not be read back.
    if path.suffix.lower() != ".json":
        return write_typed_csv(rows, path, ResultRow, extra)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(rows, path, extra=extra)
    except OSError as error:
        raise UserError(f"cannot write {path}: {why_not(path, error)}") from None
    return path
