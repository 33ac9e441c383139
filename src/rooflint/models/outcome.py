"""What `rooflint model` is asked for and what it finds: the request, each kernel set's result with
its phases, and the run's outcome. Plain data, so the set runner, the baselines, the isolated
processes, the tables and the charts all share it without importing each other."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from rooflint.core.family import Cost
from rooflint.core.specs import GpuSpec
from rooflint.engine.timing import Timing
from rooflint.models.attribution import Attribution
from rooflint.models.base import ModelSpec, Phase
from rooflint.models.checks import CheckResult
from rooflint.outputs.results import FAILING_STATUSES, ResultRow

SUM_TOLERANCE = 0.10  # per-op times must sum to within 10% of the measured step
# The sets that run a decode step's projections on --weights-dtype's codes: the weight-only kernel
# (triton) and its PyTorch reference form (eager); the others keep bf16 and say so in their plan.
QUANTIZED_SETS = ("triton", "eager")


@dataclass
class ModelRequest:
    model: str = "gpt2"
    config: str = "gpt2"
    batch: int = 8
    seq: int = 1024
    prompt: int = 512
    new_tokens: int = 128
    dtype: str = "bf16"
    weights_dtype: str | None = None  # "int8"/"fp8": decode projections quantized (models/quantized_weights.py)
    kernels: list[str] | None = None  # None: every set on a GPU, eager on a CPU
    weights: Path | None = None
    layers: int | None = None
    out: Path = Path("rooflint-out/model")
    device: str | None = None
    gpu: str | None = None
    spec_file: Path | None = None
    hf_baseline: bool = False
    rep_ms: float = 300.0
    seed: int = 0
    spec: GpuSpec | None = None  # tests hand a spec in (measuring the CPU's ceilings takes seconds)
    model_spec: ModelSpec | None = None  # a ModelSpec not in the catalog (tests, experiments)
    plots: bool = True
    # Each set in a process of its own (models/isolation.py); None: on a GPU, where it matters.
    isolate: bool | None = None
    # The decode sweep (models/sweep.py): every (batch, context) point; None: no sweep.
    sweep_batches: list[int] | None = None
    sweep_contexts: list[int] | None = None

    @property
    def code_format(self) -> str | None:
        """--weights-dtype's code format ("int8", "fp8"), or None for the model's own weights."""
        return None if self.weights_dtype in (None, "bf16") else self.weights_dtype

    def decode_weights(self, set_name: str) -> str | None:
        """The code format set_name's decode step runs its projections on, or None where they are the
        model's own weights (a set outside QUANTIZED_SETS): part of that set's decode rows' identity."""
        return self.code_format if set_name in QUANTIZED_SETS else None


@dataclass
class PhaseResult:
    phase: Phase
    timing: Timing
    tokens: int  # tokens produced per timed unit (prefill: B*T; decode: B; generate: B*N)
    costs: dict[str, Cost]  # per op; empty for generate
    attribution: Attribution | None = None
    floor_s: float = math.nan
    bound: str = ""

    @property
    def seconds(self) -> float:
        return self.timing.median_ms / 1e3

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else math.nan

    @property
    def pct_of_floor(self) -> float:
        return 100 * self.floor_s / self.seconds if self.seconds > 0 else math.nan

    @property
    def gap(self) -> float:
        """(step - sum of ops) / step: launch gaps, idle time and profiler skew."""
        if self.attribution is None:
            return math.nan
        return 1 - self.attribution.total_ms / self.timing.median_ms

    @property
    def gap_verdict(self) -> str:
        """Whether the ops add up to the step, said the same in the op table and the step row. On a
        CPU the op ranges are host wall time with Python between them: not meant to match the step,
        so the gap is shown, never judged."""
        if self.attribution is not None and self.attribution.mode != "device kernels":
            return "not checked on a CPU"
        return f"{'within' if abs(self.gap) <= SUM_TOLERANCE else 'NOT within'} {SUM_TOLERANCE:.0%}"


@dataclass
class SetResult:
    name: str
    status: str
    message: str
    plan: str = ""
    check: CheckResult | None = None
    phases: dict[str, PhaseResult] = field(default_factory=dict)
    note: str = ""


@dataclass
class ModelOutcome:
    loaded_name: str
    family: str
    spec: GpuSpec
    request: ModelRequest
    sets: list[SetResult]
    baselines: dict[str, PhaseResult]
    rows: list[ResultRow]
    files: list[Path] = field(default_factory=list)
    sweep: list = field(default_factory=list)  # models/sweep.SweepPoint, one per set and point

    @property
    def exit_code(self) -> int:
        return 1 if any(r.status in FAILING_STATUSES for r in self.rows) else 0
