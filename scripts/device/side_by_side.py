"""What the device sweeps share: check every entry against float64, time them in alternating rounds
of triton.testing.do_bench (so a drifting clock, a power cap, spreads over all of them) and write
the rows as CSV. Imported by the scripts beside it, which run as `python3 scripts/device/X.py`."""

from __future__ import annotations

import contextlib
import csv
from collections.abc import Callable
from pathlib import Path

from triton.testing import do_bench

from rooflint.engine.correctness import check


def check_entries(family, dtype: str, entries: dict[str, Callable], reference, where: str = "") -> dict[str, str]:
    """Each entry's relative error against the float64 reference; any failure stops the sweep."""
    checks = {}
    for label, call in entries.items():
        verdict = check(family, dtype, call(), reference)
        checks[label] = f"rel_err {verdict.error:.3g} (tolerance {verdict.tolerance:.3g})"
        assert verdict.passed, f"{where} {label}: {verdict.message}"
    return checks


def time_rounds(entries: dict[str, Callable], rounds: int, context=contextlib.nullcontext) -> dict[str, list[float]]:
    """Milliseconds per call of each entry, one do_bench median per round, the entries alternating."""
    times = {label: [] for label in entries}
    for _ in range(rounds):
        for label, call in entries.items():
            with context():
                times[label].append(do_bench(call, rep=100))
    return times


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
