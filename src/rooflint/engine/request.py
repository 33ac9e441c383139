"""What a bench was asked for (BenchRequest) and the checked plan it becomes (BenchPlan).

Below bench.py and fleet/, so the fleet and the measuring processes name the request's type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rooflint.core.roofs import DEFAULT_ROOF
from rooflint.engine.settings import MeasureSettings

if TYPE_CHECKING:
    from rooflint.engine.worker import Task

DEFAULT_OUT = Path("rooflint-out")


@dataclass
class BenchRequest:
    """A bench as the user asked for it; ``bench.prepare`` fills every default and checks every field once."""

    families: list[str] = field(default_factory=lambda: ["all"])
    variants: list[str] = field(default_factory=list)  # names or kinds; empty means all
    dtypes: list[str] = field(default_factory=list)  # empty: each family's defaults; ["all"]: every dtype
    size: str | None = None  # None: large on a GPU, small on a CPU
    device: str | None = None  # None: cuda when a GPU is visible
    devices: list[int] = field(default_factory=list)  # GPU indices to shard families over
    scheduler: str | None = None  # a Dask scheduler address, or "local": run as a fleet (engine/fleet)
    gpu_types: list[str] = field(default_factory=list)  # fleet GPU types that each run the whole plan
    spec_file: str | None = None
    gpu: str | None = None
    roof: str = DEFAULT_ROOF  # or "measured": the ceilings `rooflint ceilings` stored for this GPU
    out: Path = DEFAULT_OUT
    junit: Path | None = None
    measure: MeasureSettings = field(default_factory=MeasureSettings)  # regime, CUDA graphs, throttle policy
    plots: bool = True  # the roofline PNG, SVG and CSV after the rows (--no-plots: results only)
    reference_cache: bool = True  # read and keep float64 references in the user cache (engine/reference_cache)


@dataclass
class BenchPlan:
    """A checked request with its defaults filled in, and the tasks it expands to."""

    request: BenchRequest
    tasks: list[Task]
