"""A model run as ResultRows, so `rooflint report`, `compare` and `merge` read it like a bench.

Row scheme (docs/models.md):
- family  "model:<config>"  (model:gpt2, model:gpt2-medium, model:gpt2-L2 for --layers 2)
- variant the kernel set (eager, compile, triton, cuda) or an HF baseline (hf_sdpa, hf_eager,
          hf_compile, hf_generate); kind is the set's implementation kind
- shape   "op=<op>,phase=prefill,B=8,T=1024" or "op=<op>,phase=decode,B=8,prompt=512,new=128"
          (phase=generate for whole generation). op=step is the whole step: median_ms is ms per
          step (prefill: one forward; decode: one step; generate: the whole call); the other ops'
          median_ms is their profiled time within one step.
- columns phase, batch and context on every model row; tokens_per_s, floor_ms and pct_of_floor on
          op=step rows (floor and % of floor where the phase has a cost model: not generate).
"""

from __future__ import annotations

import math

from rooflint.core.family import Cost
from rooflint.core.roofline import analyse, copy_to_row, floor_seconds
from rooflint.core.specs import GpuSpec
from rooflint.engine.timing import Timing
from rooflint.models.attribution import UNATTRIBUTED
from rooflint.models.base import Phase
from rooflint.models.outcome import ModelRequest, PhaseResult, SetResult
from rooflint.outputs.results import OK, ResultRow

STEP = "step"


def shape(op: str, phase: str, batch: int, seq: int, prompt: int, new_tokens: int, weights: str | None = None) -> str:
    """A model row's shape. ``weights`` (the decode projections' code format) joins the decode and
    generate rows of a set that ran them quantized: an int8 step is another configuration than a
    bf16 one, so compare and merge must never pair the two. Prefill runs the bf16 weights in every
    set, so its rows stay comparable across formats."""
    if phase == "prefill":
        return f"op={op},phase=prefill,B={batch},T={seq}"
    tail = f",weights={weights}" if weights else ""
    return f"op={op},phase={phase},B={batch},prompt={prompt},new={new_tokens}{tail}"


def phase_of(name: str, request: ModelRequest) -> Phase:
    """The phase ``name`` of a request: prefill over ``seq`` tokens; a decode step at the loop's mean
    cache length, prompt + N/2 (the step that is profiled); generate, the whole loop."""
    if name == "prefill":
        return Phase("prefill", request.batch, request.seq, request.seq)
    if name == "decode":
        return Phase("decode", request.batch, 1, request.prompt + request.new_tokens // 2)
    return Phase("generate", request.batch, request.new_tokens, request.prompt + request.new_tokens)


def unit_cost(cost: Cost, dtype: str) -> Cost:
    """fp32 matmuls run on the CUDA cores (PyTorch leaves TF32 off for matmuls): judge them there."""
    if dtype == "fp32":
        return Cost(0.0, cost.tensor_flops + cost.cuda_flops, cost.bytes)
    return cost


def phase_floor(cost: Cost, spec: GpuSpec, dtype: str) -> tuple[float, str]:
    """The phase's floor: max(bytes / bandwidth, matmul FLOPs / matmul peak).

    Prefill at T=1024 is compute-bound (the FLOPs term); a decode step is memory-bound (weights
    plus KV cache over bandwidth). The few CUDA-core FLOPs (norms, GELU, softmax) are left out, as
    the matmul term dominates whenever compute is the limit.
    """
    return floor_seconds(unit_cost(Cost(tensor_flops=cost.tensor_flops, bytes=cost.bytes), dtype), spec, dtype)


def total_cost(costs: dict[str, Cost]) -> Cost:
    return Cost(
        sum(c.tensor_flops for c in costs.values()),
        sum(c.cuda_flops for c in costs.values()),
        sum(c.bytes for c in costs.values()),
    )


def set_timing(row: ResultRow, result: Timing) -> None:
    row.timing_mode, row.l2_flushed, row.n_samples = result.mode, result.l2_flushed, result.n_samples
    row.median_ms, row.p20_ms, row.p80_ms = result.median_ms, result.p20_ms, result.p80_ms


def set_roofline(row: ResultRow, cost: Cost, seconds: float, spec: GpuSpec, dtype: str) -> None:
    cost = unit_cost(cost, dtype)
    row.tensor_flops, row.cuda_flops, row.ideal_bytes = cost.tensor_flops, cost.cuda_flops, cost.bytes
    if seconds > 0 and math.isfinite(seconds):
        copy_to_row(analyse(cost, seconds, spec, dtype), row)
    row.tensor_peak_tflops = spec.tensor_peak_tflops(dtype) or math.nan
    row.cuda_peak_tflops = spec.cuda_peak_tflops("fp32") or math.nan


def base_row(family: str, variant: str, kind: str, dtype: str, shape_text: str, status: str = OK) -> ResultRow:
    return ResultRow(family=family, variant=variant, kind=kind, dtype=dtype, size="model", shape=shape_text,
                     status=status)  # fmt: skip


def set_rows(result: SetResult, family: str, request: ModelRequest, gpu_spec: GpuSpec,
             done: list[SetResult]) -> list[ResultRow]:  # fmt: skip
    """A kernel set's rows: one op=step row per phase, then each profiled op's."""
    eager = next((s for s in done if s.name == "eager" and s.status == OK), None)
    kind = result.name
    rows = []
    if result.status != OK:
        for name in ("prefill", "decode", "generate"):
            if name == "decode" and request.new_tokens < 2:
                continue
            row = base_row(family, result.name, kind, request.dtype, _shape(STEP, name, request, result.name),
                           result.status)  # fmt: skip
            set_phase(row, phase_of(name, request))
            row.message = "; ".join(filter(None, [result.message, result.plan]))
            if result.check is not None:
                row.rel_error, row.tolerance = result.check.rel_error, result.check.tolerance
            rows.append(row)
        return rows
    for phase_name, phase in result.phases.items():
        row = step_row(phase, family, result.name, kind, request, gpu_spec)
        if eager is not None and phase_name in eager.phases:
            row.speedup_vs_eager = eager.phases[phase_name].timing.median_ms / phase.timing.median_ms
        row.rel_error, row.tolerance = result.check.rel_error, result.check.tolerance
        row.message = step_message(phase, result)
        rows.append(row)
        if phase.attribution is not None:
            rows += op_rows(phase, family, result.name, kind, request, gpu_spec)
    return rows


def set_phase(row: ResultRow, phase: Phase) -> None:
    row.phase, row.batch, row.context = phase.name, phase.batch, phase.context


def step_row(phase: PhaseResult, family: str, variant: str, kind: str, request: ModelRequest,
             gpu_spec: GpuSpec) -> ResultRow:  # fmt: skip
    """A phase's op=step row: its timing, its throughput and, where the phase has costs, its floor."""
    row = base_row(family, variant, kind, request.dtype, _shape(STEP, phase.phase.name, request, variant))
    set_phase(row, phase.phase)
    set_timing(row, phase.timing)
    row.tokens_per_s = phase.tokens_per_s
    if phase.costs:
        set_roofline(row, total_cost(phase.costs), phase.seconds, gpu_spec, request.dtype)
        row.pct_of_roof, row.bound = phase.pct_of_floor, phase.bound  # the phase floor (docs/models.md)
        row.floor_ms, row.pct_of_floor = phase.floor_s * 1e3, phase.pct_of_floor
    return row


def step_message(phase: PhaseResult, result: SetResult) -> str:
    """What the columns cannot hold: how well the ops add up to the step, the check, the plan."""
    parts = []
    if phase.attribution is not None:
        parts.append(
            f"ops sum {phase.attribution.total_ms:.4g} ms vs step {phase.timing.median_ms:.4g} ms, gap "
            f"{phase.gap:+.1%} ({phase.gap_verdict}; the profiled step had {phase.attribution.idle_ms:.3g} ms idle)"
        )
    if result.check is not None:
        parts.append(result.check.describe())
    if phase.phase.name != "prefill" and result.note:
        parts.append(result.note)
    parts.append(result.plan)
    return "; ".join(part for part in parts if part)


def op_rows(phase: PhaseResult, family: str, variant: str, kind: str, request: ModelRequest,
            gpu_spec: GpuSpec) -> list[ResultRow]:  # fmt: skip
    attribution = phase.attribution
    assert attribution is not None
    rows = []
    step_ms = attribution.total_ms
    names = list(phase.costs) + [n for n in attribution.ops if n not in phase.costs]
    for op in names:
        timed = attribution.ops.get(op)
        if timed is None or timed.ms <= 0:
            continue
        row = base_row(family, variant, kind, request.dtype, _shape(op, phase.phase.name, request, variant))
        set_phase(row, phase.phase)
        row.median_ms, row.n_samples = timed.ms, 1
        row.timing_mode = "profiler_" + attribution.mode.replace(" ", "_")
        cost = phase.costs.get(op)
        if cost is not None:
            set_roofline(row, cost, timed.ms / 1e3, gpu_spec, request.dtype)
        top, share = timed.top_kernel()
        row.message = f"share={timed.ms / step_ms:.1%}; calls={timed.calls}; top: {top} ({share:.0%})"
        rows.append(row)
    if attribution.unattributed_ms > 0:
        row = base_row(family, variant, kind, request.dtype, _shape(UNATTRIBUTED, phase.phase.name, request, variant))
        set_phase(row, phase.phase)
        row.median_ms, row.n_samples, row.timing_mode = attribution.unattributed_ms, 1, "profiler"
        row.message = f"share={attribution.unattributed_ms / step_ms:.1%}; time in the step outside every op range"
        rows.append(row)
    return rows


def baseline_rows(baselines: dict[str, PhaseResult], family: str, request: ModelRequest,
                  gpu_spec: GpuSpec) -> list[ResultRow]:  # fmt: skip
    rows = []
    for variant, phase in baselines.items():
        kind = "compile" if "compile" in variant else "eager"
        row = step_row(phase, family, variant, kind, request, gpu_spec)
        row.message = "Hugging Face transformers, measured in this process"
        rows.append(row)
    return rows


def _shape(op: str, phase: str, request: ModelRequest, set_name: str) -> str:
    return shape(op, phase, request.batch, request.seq, request.prompt, request.new_tokens,
                 request.decode_weights(set_name))  # fmt: skip
