"""How long each row took in earlier fleet runs: the table that sizes a fleet's tasks and puts the longest first.

One JSON file in the user cache (``$ROOFLINT_CACHE/fleet/durations.json``, else
``~/.cache/rooflint/fleet/durations.json``), keyed by GPU type label, then by row key
(family/variant/dtype/shape). A row's seconds are the wall time between it and the row before it
in its task (or the task's start): its build and compile, its check against float64, its timing.
The first row of a task also holds the case's inputs and float64 reference, which the task builds
once for all its variants. Each fleet run overwrites the entries it measured, so the table follows
the caches: a cold run's compile times give way to a warm run's.

Without an entry, a row's time is estimated from its variant's kind and the size of its case (the
analytic cost model): torch.compile and max-autotune pay their compile, a CUDA variant its nvcc
build, a larger case a longer reference. Only the order and the grouping of tasks depend on it,
never a measured number.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rooflint.core import paths
from rooflint.core.registry import get_family
from rooflint.engine.worker import Task

SCHEMA = 1
# Seconds a row of each kind takes when the table has no entry for it, on a warm cache: an eager
# call is timed at once; torch.compile traces and generates code; a CUDA variant may build with
# nvcc; a library peer loads its package.
KIND_SECONDS = {"eager": 2.0, "eager_unfused": 2.0, "compile": 15.0, "triton": 5.0, "cuda": 8.0, "library": 5.0}
MAX_AUTOTUNE_SECONDS = 60.0  # a variant named *_max: torch.compile's max-autotune benchmarks many kernels
# The inputs and float64 reference of a case, estimated from its work: float64 runs far below a
# GPU's low-precision peaks (and in software on a CPU), so a case of many FLOPs or bytes pays seconds.
SETUP_BASE_SECONDS = 1.0
SETUP_FLOPS_PER_S = 2e11
SETUP_BYTES_PER_S = 2e10


def table_path() -> Path:
    return paths.cache_dir("fleet") / "durations.json"


@dataclass
class DurationTable:
    """GPU type label -> row key -> seconds, as measured by the last fleet run that ran the row there."""

    seconds: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None = None) -> DurationTable:
        """The table on disk; an empty one where there is none or it cannot be read (a cache never
        stops a bench: the estimates take over)."""
        path = path or table_path()
        try:
            payload = json.loads(path.read_text())
        except (OSError, ValueError):
            return cls()
        if not isinstance(payload, dict) or payload.get("schema") != SCHEMA:
            return cls()
        gpus = payload.get("seconds")
        if not isinstance(gpus, dict):
            return cls()
        table = {
            str(gpu): {str(key): float(value) for key, value in rows.items() if _seconds(value)}
            for gpu, rows in gpus.items()
            if isinstance(rows, dict)
        }
        return cls(table)

    def get(self, gpu: str, key: str) -> float | None:
        return self.seconds.get(gpu, {}).get(key)

    def update(self, gpu: str, observed: dict[str, float]) -> None:
        self.seconds.setdefault(gpu, {}).update(observed)

    def save(self, path: Path | None = None) -> Path:
        """Write the table whole, through a temporary file renamed into place: two clients finishing
        at once leave one complete table, never a torn one. Raises OSError where it cannot write."""
        path = path or table_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            temporary.write_text(json.dumps({"schema": SCHEMA, "seconds": self.seconds}, indent=1, sort_keys=True))
            os.replace(temporary, path)
        finally:
            with contextlib.suppress(OSError):
                temporary.unlink()
        return path


def _seconds(value: object) -> bool:
    """Whether a stored entry is a row's seconds: a finite number, not negative. JSON reads Infinity
    and NaN too: an infinite entry cut its case into inf / inf groups, a ValueError before any row."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < math.inf


def default_seconds(task: Task) -> float:
    """A row's seconds by the cost model, for a row the table has never seen; the baseline's include
    its case's setup, as the first row of a task's does when measured."""
    family = get_family(task.family)
    variant = family.variants[task.variant]
    seconds = MAX_AUTOTUNE_SECONDS if task.variant.endswith("_max") else KIND_SECONDS.get(variant.kind, 5.0)
    if variant is family.baseline:
        seconds += setup_seconds(task)
    return seconds


def setup_seconds(task: Task) -> float:
    """The cost model's seconds for a case's inputs and float64 reference."""
    cost = get_family(task.family).cost(task.params, task.dtype)
    return SETUP_BASE_SECONDS + cost.flops / SETUP_FLOPS_PER_S + cost.bytes / SETUP_BYTES_PER_S


def estimator(table: DurationTable, gpu: str) -> Callable[[Task], float]:
    """Seconds for each task on GPU type ``gpu``: the table's where it has the row, else the cost model's."""

    def seconds(task: Task) -> float:
        known = table.get(gpu, task.key)
        return known if known is not None else default_seconds(task)

    return seconds
