"""Merge results from several machines or GPUs into one long-format table.

Rows are identified by ResultRow.key(): family, variant, dtype, shape and GPU. Two files that
measured the same key (a re-run, or the same machine's results passed twice) would otherwise
count twice in reports and make compare ambiguous, so only the row with the newest timestamp is
kept. Timestamps are ISO 8601 as rooflint writes them; a row without a readable timestamp loses
to one with it, and on a tie the file named later on the command line wins.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rooflint.core.errors import UserError
from rooflint.core.paths import why_not
from rooflint.outputs.results import COLUMNS, ResultRow, read_results, rows_from_frame, write_json, write_typed_csv

# The columns that identify a row, read off ResultRow.key() itself (a row whose every field holds
# its own name keys as the names), so the merge key and the row key can never disagree.
KEY = list(ResultRow(**{name: name for name in COLUMNS}).key())


@dataclass
class Merged:
    frame: pd.DataFrame
    duplicates: list[tuple[str, ...]]  # keys that occurred more than once (one entry per dropped row)
    sources: list[str]

    def describe(self) -> str:
        gpus = sorted(set(self.frame["gpu"].astype(str)))
        text = (
            f"merged {len(self.frame)} rows from {len(self.sources)} files "
            f"(GPUs: {', '.join(g or '?' for g in gpus) or 'none'})"
        )
        if self.duplicates:
            text += f"; dropped {len(self.duplicates)} duplicate rows, keeping the newest timestamp of each key"
        return text


def dedupe(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[str, ...]]]:
    """Keep one row per key: the newest timestamp, then the later position in the frame."""
    frame = frame.reset_index(drop=True)
    when = pd.to_datetime(frame["timestamp"].astype(str), utc=True, errors="coerce", format="ISO8601")
    order = pd.DataFrame({"when": when, "position": range(len(frame))})
    # Unreadable timestamps sort first, so any dated row beats them.
    order = order.sort_values(["when", "position"], na_position="first", kind="stable")
    ranked = frame.loc[order.index]
    keys = ranked[KEY].astype(str)
    dropped_mask = keys.duplicated(keep="last")
    dropped = [tuple(k) for k in keys[dropped_mask].itertuples(index=False)]
    kept = ranked[~dropped_mask].sort_index().reset_index(drop=True)
    return kept, dropped


def merge_frames(frames: Iterable[pd.DataFrame], sources: Iterable[str] = ()) -> Merged:
    frames = list(frames)
    if not frames:
        raise UserError("nothing to merge: give at least one results file")
    combined = pd.concat([f[COLUMNS] for f in frames], ignore_index=True)
    kept, dropped = dedupe(combined)
    return Merged(kept, dropped, list(sources))


def merge_files(paths: Iterable[Path | str]) -> Merged:
    paths = [Path(p) for p in paths]
    return merge_frames([read_results(p) for p in paths], [str(p) for p in paths])


def write_frame(frame: pd.DataFrame, path: Path | str) -> Path:
    """Write results in rooflint's own schema: CSV by default, JSON when the name ends in .json."""
    path = Path(path)
    rows = rows_from_frame(frame)
    # Case-blind, as the reader is: merged.JSON written as CSV could not be read back.
    if path.suffix.lower() != ".json":
        return write_typed_csv(rows, path, ResultRow)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(rows, path)
    except OSError as error:
        raise UserError(f"cannot write {path}: {why_not(path, error)}") from None
    return path
