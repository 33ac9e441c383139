"""`rooflint model`: build a model, check each kernel set against Hugging Face, time and profile it.

For each kernel set: correctness first (prefill logits and greedy tokens against HF eager; a set
that fails is reported and never timed), then the three phases (prefill, decode, generate) are
timed, then one prefill forward and one decode step are profiled and their kernels attributed to
ops. Every number becomes a ResultRow (models/rows.py), and each phase gets a table and a
roofline plot with one point per op.
"""

from __future__ import annotations

import gc
import math
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rooflint.core.errors import UserError, VariantSkipped
from rooflint.core.family import DTYPES, Cost
from rooflint.core.specs import GpuSpec
from rooflint.engine import environment
from rooflint.engine.timing import Timing
from rooflint.models import checks, measure
from rooflint.models import rows as R
from rooflint.models.attribution import UNATTRIBUTED, Attribution, profile_step, split_phases
from rooflint.models.base import LoadedModel, ModelSpec, Phase, build, require_transformers
from rooflint.models.kernel_sets import KERNEL_SETS, make_kernel_set
from rooflint.models.registry import get_model
from rooflint.models.runner import Runner
from rooflint.outputs.results import ERROR, FAILED, FAILING_STATUSES, OK, SKIPPED, ResultRow, ResultWriter

SUM_TOLERANCE = 0.10  # per-op times must sum to within 10% of the measured step


@dataclass
class ModelRequest:
    model: str = "gpt2"
    config: str = "gpt2"
    batch: int = 8
    seq: int = 1024
    prompt: int = 512
    new_tokens: int = 128
    dtype: str = "bf16"
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
    model_spec: ModelSpec | None = None  # a ModelSpec not in the registry (tests, experiments)
    plots: bool = True
    # Each set in a process of its own (models/isolation.py); None: on a GPU, where it matters.
    isolate: bool | None = None


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


@dataclass
class SetResult:
    name: str
    status: str
    message: str
    plan: str = ""
    check: checks.CheckResult | None = None
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

    @property
    def exit_code(self) -> int:
        return 1 if any(r.status in FAILING_STATUSES for r in self.rows) else 0


def resolve_device(device: str | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cuda", "cpu"):
        raise UserError(f"unknown device {device!r}; valid: cuda, cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda asked for, but no CUDA GPU is visible; use --device cpu")
    return torch.device(device)


def validate(request: ModelRequest) -> list[str]:
    if request.dtype not in DTYPES:
        raise UserError(f"unknown dtype {request.dtype!r}; valid: {', '.join(DTYPES)}")
    for name in ("batch", "seq", "prompt", "new_tokens"):
        if getattr(request, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if request.layers is not None and request.layers < 1:
        raise UserError("--layers must be at least 1")
    sets = request.kernels
    unknown = [k for k in sets or [] if k not in KERNEL_SETS]
    if unknown:
        raise UserError(f"unknown kernel set {', '.join(map(repr, unknown))}; valid: {', '.join(KERNEL_SETS)}")
    return sets or []


def run_model(request: ModelRequest, log: Callable[[str], None] = lambda text: None) -> ModelOutcome:
    wanted = validate(request)
    spec_model = request.model_spec or get_model(request.model)
    require_transformers()
    device = resolve_device(request.device)
    default = list(KERNEL_SETS) if device.type == "cuda" else ["eager"]
    wanted = [k for k in KERNEL_SETS if k in wanted] if wanted else default
    gpu_spec = request.spec or _gpu_spec(request, device)
    log(f"building {request.model} {request.config} ({request.dtype}, {device.type})")
    loaded = load(request, spec_model, device)
    dims = loaded.dims
    if request.seq > dims.max_positions or request.prompt + request.new_tokens > dims.max_positions:
        raise UserError(
            f"{loaded.config_name} has {dims.max_positions} positions: --seq and --prompt + --new-tokens must fit"
        )
    family = f"model:{loaded.config_name}"
    ids, prompt = inputs(request, dims.vocab, device)

    isolate = request.isolate if request.isolate is not None else device.type == "cuda"
    reference_logits = reference_tokens = None
    if not isolate:  # an isolated set computes its own, in its process
        log("HF eager reference: logits and greedy tokens")
        reference_logits, reference_tokens = references(loaded, request, ids, prompt)

    writer = ResultWriter(request.out)
    outcome = ModelOutcome(loaded.config_name, family, gpu_spec, request, [], {}, [])

    def emit(row: ResultRow) -> None:
        writer.append(environment.stamp(row, gpu_spec, device.type))

    def baselines(compiled: bool) -> None:
        from rooflint.models.baseline import run_baselines

        measured = run_baselines(loaded, request, device, gpu_spec, ids, prompt, log, compiled=compiled)
        outcome.baselines.update(measured)
        for row in baseline_rows(measured, family, request, gpu_spec):
            emit(row)

    try:
        for name in wanted:
            if name == "compile" and request.hf_baseline and not outcome.baselines:
                baselines(compiled=False)  # the quick baselines before the minutes of compiling
            log(f"kernel set {name}" + (" (own process)" if isolate else ""))
            if isolate:
                from rooflint.models.isolation import run_set_isolated

                result = run_set_isolated(name, request, gpu_spec)
            else:
                result = run_set(name, loaded, request, device, gpu_spec, ids, prompt, reference_logits,
                                 reference_tokens)  # fmt: skip
            outcome.sets.append(result)
            for row in set_rows(result, family, request, gpu_spec, outcome.sets):
                emit(row)
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
        del reference_logits
        if request.hf_baseline:
            if not outcome.baselines:
                baselines(compiled=False)
            baselines(compiled=True)
    finally:
        writer.close()
        outcome.rows = writer.rows
    outcome.files = [writer.csv_path, writer.out_dir / "results.json"]
    from rooflint.models.tables import write_tables

    outcome.files.append(write_tables(outcome))
    if request.plots:
        from rooflint.models.plot import plot_phases

        outcome.files += plot_phases(outcome)
    return outcome


def load(request: ModelRequest, spec_model: ModelSpec, device: torch.device) -> LoadedModel:
    """The request's model, built from its seed (or its --weights): the same in every process."""
    return build(spec_model, request.config, DTYPES[request.dtype], device, weights_dir=request.weights,
                 layers=request.layers, seed=request.seed)  # fmt: skip


def references(loaded: LoadedModel, request: ModelRequest, ids, prompt) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face eager's logits over ``ids`` and its first greedy tokens after ``prompt``: what
    every kernel set is checked against."""
    tokens = min(checks.CHECK_TOKENS, request.new_tokens)
    return checks.hf_logits(loaded.hf, ids), checks.hf_greedy(loaded.hf, prompt, tokens)


def inputs(request: ModelRequest, vocab: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(prefill ids [B, seq], prompt [B, prompt]): the same for every set and every process, by seed."""
    generator = torch.Generator(device="cpu").manual_seed(request.seed)
    ids = torch.randint(0, vocab, (request.batch, request.seq), generator=generator).to(device)
    prompt = torch.randint(0, vocab, (request.batch, request.prompt), generator=generator).to(device)
    return ids, prompt


def _gpu_spec(request: ModelRequest, device: torch.device) -> GpuSpec:
    if device.type == "cuda":
        from rooflint.core.specs import current_gpu_spec

        return current_gpu_spec(request.spec_file, request.gpu)
    from rooflint.engine.ceilings import measure_cpu_ceilings

    return measure_cpu_ceilings()


def run_set(name, loaded: LoadedModel, request, device, gpu_spec, ids, prompt, ref_logits, ref_tokens) -> SetResult:
    spec_model, dims = loaded.spec, loaded.dims
    try:
        kernels = make_kernel_set(name, loaded.dtype, device, dims.head_dim, spec_model.norm_eps(loaded.hf.config))
    except VariantSkipped as why:
        return SetResult(name, SKIPPED, str(why))
    runner = Runner(loaded, kernels, request.batch, request.prompt, request.new_tokens)
    result = SetResult(name, OK, "", plan=kernels.describe())
    try:
        # Correctness before any timing, on the path that is timed (graphs included).
        logits = runner.prefill(ids)
        runner.capture()
        result.note = runner.graph_note
        tokens = runner.generate(prompt)
        result.check = checks.compare(logits, ref_logits, tokens, ref_tokens, request.dtype)
        del logits
        if not result.check.passed:
            result.status, result.message = FAILED, result.check.describe()
            return result
        result.phases = measure_phases(runner, request, device, gpu_spec, ids, prompt)
    except torch.cuda.OutOfMemoryError as error:
        result.status, result.message = ERROR, f"out of memory: {str(error).splitlines()[0]}"
    except Exception as error:  # one set's failure is reported; the others still run
        last = traceback.extract_tb(error.__traceback__)[-1]
        where = f"{Path(last.filename).name}:{last.lineno}"
        result.status, result.message = ERROR, f"{type(error).__name__} at {where}: {str(error).splitlines()[0][:200]}"
    finally:
        runner.release()
    return result


def measure_phases(runner: Runner, request, device, gpu_spec, ids, prompt) -> dict[str, PhaseResult]:
    loaded, dims, dtype = runner.loaded, runner.dims, request.dtype
    spec_model = loaded.spec
    batch, new = request.batch, request.new_tokens
    profiled = not runner.kernels.compiled  # inductor fuses across op boundaries: no per-op ranges
    phases: dict[str, PhaseResult] = {}

    prefill = Phase("prefill", batch, request.seq, request.seq)
    timed = measure.time_prefill(lambda: runner.prefill(ids), device, gpu_spec.l2_bytes, request.rep_ms)
    costs = spec_model.op_costs(dims, prefill, dtype, runner.kernels.fusions(prefill.rows, False))
    phases["prefill"] = PhaseResult(prefill, timed, batch * request.seq, costs)
    if profiled:
        phases["prefill"].attribution = _profiled(runner, lambda: runner.prefill(ids), device)

    whole, per_step = measure.time_generation(lambda: runner.start(prompt), runner.decode, new - 1, device,
                                              request.rep_ms)  # fmt: skip
    if per_step is not None:
        middle = new // 2  # the profiled step sees the loop's mean cache length, prompt + N/2
        decode = Phase("decode", batch, 1, request.prompt + middle)
        costs = spec_model.op_costs(dims, decode, dtype, runner.kernels.fusions(decode.rows, True))
        phases["decode"] = PhaseResult(decode, per_step, batch, costs)
        if profiled:
            runner.start(prompt)
            replay = runner.graphs[middle - 1].replay if runner.graphs else None  # the timed step's graph
            phases["decode"].attribution = _profiled(runner, lambda: runner.step(middle), device, replay)
    phases["generate"] = PhaseResult(Phase("generate", batch, new, request.prompt + new), whole, batch * new, {})
    for result in phases.values():
        if result.costs:
            result.floor_s, result.bound = R.phase_floor(R.total_cost(result.costs), gpu_spec, dtype)
    return phases


def _profiled(runner: Runner, fn, device, replay=None) -> Attribution:
    runner.rec.enabled = True
    try:
        with torch.no_grad():
            return split_phases(profile_step(fn, device, replay), runner.kernels.phase_shares())
    finally:
        runner.rec.enabled = False


# ---- rows ----------------------------------------------------------------------------------------
def set_rows(result: SetResult, family, request, gpu_spec, done: list[SetResult]) -> list[ResultRow]:
    eager = next((s for s in done if s.name == "eager" and s.status == OK), None)
    kind = result.name
    rows = []
    if result.status != OK:
        for phase in ("prefill", "decode", "generate"):
            if phase == "decode" and request.new_tokens < 2:
                continue
            row = R.base_row(family, result.name, kind, request.dtype, _shape(R.STEP, phase, request), result.status)
            row.message = "; ".join(filter(None, [result.message, result.plan]))
            if result.check is not None:
                row.rel_error, row.tolerance = result.check.rel_error, result.check.tolerance
            rows.append(row)
        return rows
    for phase_name, phase in result.phases.items():
        row = R.base_row(family, result.name, kind, request.dtype, _shape(R.STEP, phase_name, request))
        R.set_timing(row, phase.timing)
        if phase.costs:
            R.set_roofline(row, R.total_cost(phase.costs), phase.seconds, gpu_spec, request.dtype)
            row.pct_of_roof, row.bound = phase.pct_of_floor, phase.bound  # the phase floor (docs/models.md)
        if eager is not None and phase_name in eager.phases:
            row.speedup_vs_eager = eager.phases[phase_name].timing.median_ms / phase.timing.median_ms
        row.rel_error, row.tolerance = result.check.rel_error, result.check.tolerance
        row.message = step_message(phase, result)
        rows.append(row)
        if phase.attribution is not None:
            rows += op_rows(phase, family, result.name, kind, request, gpu_spec)
    return rows


def step_message(phase: PhaseResult, result: SetResult) -> str:
    parts = [f"tok/s={phase.tokens_per_s:.4g}"]
    if phase.costs:
        parts.append(f"floor {phase.floor_s * 1e3:.4g} ms ({phase.bound}), {phase.pct_of_floor:.3g}% of floor")
    if phase.attribution is not None:
        verdict = "ok" if abs(phase.gap) <= SUM_TOLERANCE else f"over {SUM_TOLERANCE:.0%}"
        parts.append(
            f"ops sum {phase.attribution.total_ms:.4g} ms vs step {phase.timing.median_ms:.4g} ms, "
            f"gap {phase.gap:+.1%} ({verdict}; the profiled step had {phase.attribution.idle_ms:.3g} ms idle)"
        )
    if result.check is not None:
        parts.append(result.check.describe())
    if phase.phase.name != "prefill" and result.note:
        parts.append(result.note)
    parts.append(result.plan)
    return "; ".join(parts)


def op_rows(phase: PhaseResult, family, variant, kind, request, gpu_spec) -> list[ResultRow]:
    attribution = phase.attribution
    rows = []
    step_ms = attribution.total_ms
    names = list(phase.costs) + [n for n in attribution.ops if n not in phase.costs]
    for op in names:
        timed = attribution.ops.get(op)
        if timed is None or timed.ms <= 0:
            continue
        row = R.base_row(family, variant, kind, request.dtype, _shape(op, phase.phase.name, request))
        row.median_ms, row.n_samples = timed.ms, 1
        row.timing_mode = "profiler_" + attribution.mode.replace(" ", "_")
        cost = phase.costs.get(op)
        if cost is not None:
            R.set_roofline(row, cost, timed.ms / 1e3, gpu_spec, request.dtype)
        top, share = timed.top_kernel()
        row.message = f"share={timed.ms / step_ms:.1%}; calls={timed.calls}; top: {top} ({share:.0%})"
        rows.append(row)
    if attribution.unattributed_ms > 0:
        row = R.base_row(family, variant, kind, request.dtype, _shape(UNATTRIBUTED, phase.phase.name, request))
        row.median_ms, row.n_samples, row.timing_mode = attribution.unattributed_ms, 1, "profiler"
        row.message = f"share={attribution.unattributed_ms / step_ms:.1%}; time in the step outside every op range"
        rows.append(row)
    return rows


def baseline_rows(baselines: dict[str, PhaseResult], family, request, gpu_spec) -> list[ResultRow]:
    rows = []
    for variant, phase in baselines.items():
        kind = "compile" if "compile" in variant else "eager"
        row = R.base_row(family, variant, kind, request.dtype, _shape(R.STEP, phase.phase.name, request))
        R.set_timing(row, phase.timing)
        if phase.costs:
            R.set_roofline(row, R.total_cost(phase.costs), phase.seconds, gpu_spec, request.dtype)
            row.pct_of_roof, row.bound = phase.pct_of_floor, phase.bound
        row.message = f"tok/s={phase.tokens_per_s:.4g}; Hugging Face transformers, measured in this process"
        rows.append(row)
    return rows


def _shape(op: str, phase: str, request: ModelRequest) -> str:
    return R.shape(op, phase, request.batch, request.seq, request.prompt, request.new_tokens)
