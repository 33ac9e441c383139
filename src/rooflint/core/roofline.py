"""Roofline maths: join a measured time with a cost model and a GPU's ceilings.

The model: a call can finish no sooner than its slowest resource allows, so its floor is
max(bytes / bandwidth, tensor FLOPs / tensor peak, CUDA-core FLOPs / CUDA-core peak). Memory,
tensor cores and CUDA cores are separate hardware that run at the same time: a kernel that
overlaps its epilogue or softmax (CUDA cores) with its matmuls (tensor cores) is bound by the
slower of the two, not by their sum, so only the max is a true lower bound on time that no honest
kernel beats. The sum would be a model of a kernel that overlaps nothing; a well-pipelined one
legitimately runs faster than it. % of roof is floor time over measured time, which is the same
as achieved over attainable FLOP/s, and still defined for kernels that do no FLOPs. Each row keeps
both compute roofs (tensor_peak_tflops, cuda_peak_tflops, for the units its FLOPs run on);
peak_tflops is the row's FLOPs over its compute floor, the FLOP rate of both units at once.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rooflint.core.gpu_spec import CUDA_CORE_PRECISION, GpuSpec, tensor_precision_of

if TYPE_CHECKING:  # family imports torch; lint, compare and report need only this module's maths
    from rooflint.core.family import Cost


@dataclass(frozen=True)
class RooflinePoint:
    achieved_tflops: float
    achieved_gbps: float
    ai_flop_per_byte: float
    peak_tflops: float  # FLOPs / compute floor: both units' rate when their work overlaps fully
    bandwidth_gbps: float
    attainable_tflops: float
    pct_of_roof: float
    bound: str
    compute_unit: str  # the unit whose time sets the compute floor
    precision: str
    floor_seconds: float
    tensor_peak_tflops: float  # the tensor-core roof, NaN when the call does no tensor-core FLOPs
    cuda_peak_tflops: float  # the CUDA-core roof, NaN when the call does no CUDA-core FLOPs


@dataclass(frozen=True)
class ComputeFloor:
    """The time the FLOPs alone take at peak, the unit and precision that set it, and each unit's roof."""

    seconds: float  # max(tensor FLOPs / tensor peak, CUDA-core FLOPs / CUDA-core peak); NaN if a peak is missing
    unit: str
    precision: str
    tensor_peak_tflops: float
    cuda_peak_tflops: float


def compute_floor(cost: Cost, spec: GpuSpec, tensor_precision: str) -> ComputeFloor:
    """The compute floor of ``cost``: each unit's FLOPs over its own peak, the slower unit wins."""
    tensor_precision = tensor_precision_of(tensor_precision)  # a dtype name (fp8_e4m3) runs fp8 MMAs
    tensor_peak = (spec.tensor_peak_tflops(tensor_precision) or math.nan) if cost.tensor_flops else math.nan
    cuda_peak = (spec.cuda_peak_tflops(CUDA_CORE_PRECISION) or math.nan) if cost.cuda_flops else math.nan
    tensor_s = cost.tensor_flops / (tensor_peak * 1e12) if cost.tensor_flops else 0.0
    cuda_s = cost.cuda_flops / (cuda_peak * 1e12) if cost.cuda_flops else 0.0
    # A missing peak gives no floor rather than a wrong one (NaN propagates through max()).
    seconds = math.nan if math.isnan(tensor_s) or math.isnan(cuda_s) else max(tensor_s, cuda_s)
    if cost.tensor_flops and (math.isnan(tensor_s) or tensor_s >= cuda_s):
        unit, precision = "tensor", tensor_precision
    else:
        unit, precision = "cuda", CUDA_CORE_PRECISION
    return ComputeFloor(seconds, unit, precision, tensor_peak, cuda_peak)


def floor_seconds(cost: Cost, spec: GpuSpec, tensor_precision: str) -> tuple[float, str]:
    """The fastest any implementation can run, and whether memory or compute sets it."""
    memory_s = cost.bytes / (spec.bandwidth_gbps * 1e9)
    compute_s = compute_floor(cost, spec, tensor_precision).seconds
    if math.isnan(compute_s):
        return math.nan, ""
    return (memory_s, "memory") if memory_s >= compute_s else (compute_s, "compute")


def analyse(cost: Cost, seconds: float, spec: GpuSpec, tensor_precision: str) -> RooflinePoint:
    compute = compute_floor(cost, spec, tensor_precision)
    floor_s, bound = floor_seconds(cost, spec, tensor_precision)
    peak = cost.flops / compute.seconds / 1e12 if compute.seconds > 0 else math.nan  # NaN > 0 is False
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
        compute_unit=compute.unit,
        precision=compute.precision,
        floor_seconds=floor_s,
        tensor_peak_tflops=compute.tensor_peak_tflops,
        cuda_peak_tflops=compute.cuda_peak_tflops,
    )


def copy_to_row(point: RooflinePoint, row) -> None:
    """Set a result row's roofline columns (ResultRow names them as RooflinePoint does)."""
    for field in dataclasses.fields(point):
        if hasattr(row, field.name):
            setattr(row, field.name, getattr(point, field.name))
