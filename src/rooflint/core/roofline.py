"""Roofline maths: join a measured time with a cost model and a GPU's ceilings.

The floor of a call is max(bytes / bandwidth, tensor FLOPs / tensor peak + CUDA-core FLOPs /
CUDA-core peak): the two units' times add because a kernel's non-matmul work (softmax, epilogues)
mostly does not overlap its matmul work perfectly, and treating them as additive keeps the roof an
upper bound that no honest kernel exceeds. % of roof is floor time over measured time, which is
the same as achieved over attainable FLOP/s, and still defined for kernels that do no FLOPs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from rooflint.core.family import Cost
from rooflint.core.specs import GpuSpec

# CUDA-core work in every rooflint variant (and in PyTorch's own kernels, through opmath) runs in
# fp32 even for fp16/bf16 tensors, so fp32 is the CUDA-core precision whatever the storage dtype.
CUDA_CORE_PRECISION = "fp32"


@dataclass(frozen=True)
class RooflinePoint:
    achieved_tflops: float
    achieved_gbps: float
    ai_flop_per_byte: float
    peak_tflops: float
    bandwidth_gbps: float
    attainable_tflops: float
    pct_of_roof: float
    bound: str
    compute_unit: str
    precision: str
    floor_seconds: float


def compute_seconds(cost: Cost, spec: GpuSpec, tensor_precision: str) -> tuple[float, str, str]:
    """Time the FLOPs alone take at peak, and the unit and precision that dominate it."""
    tensor_peak = spec.tensor_peak_tflops(tensor_precision) if cost.tensor_flops else None
    cuda_peak = spec.cuda_peak_tflops(CUDA_CORE_PRECISION) if cost.cuda_flops else None
    if cost.tensor_flops and tensor_peak is None:
        return math.nan, "tensor", tensor_precision
    if cost.cuda_flops and cuda_peak is None:
        return math.nan, "cuda", CUDA_CORE_PRECISION
    tensor_s = cost.tensor_flops / (tensor_peak * 1e12) if tensor_peak else 0.0
    cuda_s = cost.cuda_flops / (cuda_peak * 1e12) if cuda_peak else 0.0
    if tensor_s >= cuda_s and cost.tensor_flops:
        return tensor_s + cuda_s, "tensor", tensor_precision
    return tensor_s + cuda_s, "cuda", CUDA_CORE_PRECISION


def floor_seconds(cost: Cost, spec: GpuSpec, tensor_precision: str) -> tuple[float, str]:
    """The fastest any implementation can run, and whether memory or compute sets it."""
    memory_s = cost.bytes / (spec.bandwidth_gbps * 1e9)
    compute_s, _, _ = compute_seconds(cost, spec, tensor_precision)
    if math.isnan(compute_s):
        return math.nan, ""
    return (memory_s, "memory") if memory_s >= compute_s else (compute_s, "compute")


def analyse(cost: Cost, seconds: float, spec: GpuSpec, tensor_precision: str) -> RooflinePoint:
    compute_s, unit, precision = compute_seconds(cost, spec, tensor_precision)
    floor_s, bound = floor_seconds(cost, spec, tensor_precision)
    peak = cost.flops / compute_s / 1e12 if compute_s and compute_s > 0 else math.nan
    ai = cost.intensity if cost.bytes else math.nan
    attainable = cost.flops / floor_s / 1e12 if floor_s and cost.flops else math.nan
    return RooflinePoint(
        achieved_tflops=cost.flops / seconds / 1e12 if seconds > 0 else math.nan,
        achieved_gbps=cost.bytes / seconds / 1e9 if seconds > 0 else math.nan,
        ai_flop_per_byte=ai,
        peak_tflops=peak,
        bandwidth_gbps=spec.bandwidth_gbps,
        attainable_tflops=attainable,
        pct_of_roof=100.0 * floor_s / seconds if seconds > 0 and floor_s == floor_s else math.nan,
        bound=bound,
        compute_unit=unit,
        precision=precision,
        floor_seconds=floor_s,
    )


def copy_to_row(point: RooflinePoint, row) -> None:
    """Set a result row's roofline columns (ResultRow names them as RooflinePoint does)."""
    for field in dataclasses.fields(point):
        if hasattr(row, field.name):
            setattr(row, field.name, getattr(point, field.name))
