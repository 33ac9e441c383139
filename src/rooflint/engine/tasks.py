"""A bench's unit of work, and the row written for it without measuring it (skipped, crashed, lost).

Importable without torch (the measuring code, engine/worker.py, imports it): a fleet's Dask worker
reads its tasks and starts the measuring process, which alone imports torch; the worker importing it
too cost a second or more before that process could start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rooflint.core import registry
from rooflint.core.shapes import shape_label
from rooflint.outputs.results import ResultRow


@dataclass(frozen=True)
class Task:
    family: str
    variant: str
    dtype: str
    size: str
    params: dict[str, Any]

    @property
    def key(self) -> str:
        return f"{self.family}/{self.variant}/{self.dtype}/{shape_label(self.params)}"

    @property
    def kind(self) -> str:
        """Its variant's kind, for a row written without running it (a crash, a lost worker)."""
        return registry.get_family(self.family).variants[self.variant].kind

    @property
    def nvtx_name(self) -> str:
        return f"{self.family}/{self.variant}/{self.dtype}/{self.size}"


def base_row(task: Task, kind: str, status: str, message: str = "") -> ResultRow:
    variant = registry.get_family(task.family).variants.get(task.variant)
    library = variant.library if variant is not None else None
    return ResultRow(
        library=library.name if library is not None else "",
        library_version=library.version() if library is not None else "",
        family=task.family,
        variant=task.variant,
        kind=kind,
        dtype=task.dtype,
        size=task.size,
        shape=shape_label(task.params),
        status=status,
        message=message,
    )
