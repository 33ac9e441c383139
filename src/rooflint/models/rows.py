"""A model run as ResultRows, so `rooflint report`, `compare` and `merge` read it like a bench.

Row scheme (docs/models.md):
- family  "model:<config>"  (model:gpt2, model:gpt2-medium, model:gpt2-L2 for --layers 2)
- variant the kernel set (eager, compile, triton, cuda) or an HF baseline (hf_sdpa, hf_eager,
          hf_compile, hf_generate); kind is the set's implementation kind
- shape   "op=<op>,phase=prefill,B=8,T=1024" or "op=<op>,phase=decode,B=8,prompt=512,new=128"
          (phase=generate for whole generation). op=step is the whole step: median_ms is ms per
          step (prefill: one forward; decode: one step; generate: the whole call) and the message
          leads with tok/s; the other ops' median_ms is their profiled time within one step.
"""

from __future__ import annotations

import math

from rooflint.core.family import Cost
from rooflint.core.roofline import analyse, copy_to_row, floor_seconds
from rooflint.core.specs import GpuSpec
from rooflint.engine.timing import Timing
from rooflint.outputs.results import OK, ResultRow

STEP = "step"


def shape(op: str, phase: str, batch: int, seq: int, prompt: int, new_tokens: int) -> str:
    if phase == "prefill":
        return f"op={op},phase=prefill,B={batch},T={seq}"
    return f"op={op},phase={phase},B={batch},prompt={prompt},new={new_tokens}"


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
