"""The roof a row is judged under, and where the row sits beneath it.

Whose ceilings: recorded_spec (those recorded in the row when it was measured), upper_bound_spec
(measured ceilings raised to the datasheet's where it is higher), gpu_key (the GPU a gpu column
names) and check_gpu, the wrong_gpu rule (a row judged against another GPU's ceilings). Where the row
sits: roof_position, its % of the attainable ceiling, of the compute floor and of the bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from rooflint.analysis.lint.findings import Finding, Severity, row_label
from rooflint.core.fmt import finite
from rooflint.core.roofline import CUDA_CORE_PRECISION
from rooflint.core.specs import GpuSpec, builtin_specs, detect, spec_from_rows, unit_precisions
from rooflint.outputs.results import ResultRow


def recorded_spec(row: ResultRow) -> GpuSpec | None:
    """The ceilings a rooflint row was judged against when measured (CPU rows: measured at start)."""
    return spec_from_rows(row.gpu, [row])


def _peak(spec: GpuSpec, unit: str, precision: str) -> float | None:
    return spec.tensor_peak_tflops(precision) if unit == "tensor" else spec.cuda_peak_tflops(precision)


@dataclass(frozen=True)
class _Roof:
    pct: float  # % of the attainable ceiling the row reaches: floor time over measured time
    compute_pct: float  # compute floor (the slower unit) over the measured time
    memory_pct: float  # achieved bytes/s over the bandwidth
    missing: str  # a peak the spec lacks ("tensor fp8"), or ""


def roof_position(row: ResultRow, spec: GpuSpec) -> _Roof:
    """Where the row sits under spec's roof, from its time and cost, or from its achieved rates.

    The floor is rooflint.core.roofline's: max(bytes / bandwidth, tensor FLOPs / tensor peak,
    CUDA-core FLOPs / CUDA-core peak). Recomputed here rather than read from pct_of_roof, so a file
    can be judged against any spec and a plain CSV (no pct column) gets the same maths.
    """
    tensor_precision, cuda_precision = unit_precisions(row.compute_unit, row.precision, row.dtype)
    seconds = row.median_ms / 1e3 if finite(row.median_ms) and row.median_ms > 0 else math.nan
    flops = (row.tensor_flops or 0.0) + (row.cuda_flops or 0.0)
    nbytes = row.ideal_bytes if finite(row.ideal_bytes) else 0.0
    if not finite(seconds) and flops and finite(row.achieved_tflops) and row.achieved_tflops > 0:
        seconds = flops / (row.achieved_tflops * 1e12)
    if not finite(seconds) and nbytes and finite(row.achieved_gbps) and row.achieved_gbps > 0:
        seconds = nbytes / (row.achieved_gbps * 1e9)
    missing = ""
    compute_s = 0.0
    for amount, unit, precision in (
        (row.tensor_flops, "tensor", tensor_precision),
        (row.cuda_flops, "cuda", cuda_precision),
    ):
        if not amount:
            continue
        peak = _peak(spec, unit, precision)
        if not peak:
            missing = f"{unit} {precision}"
            continue
        # The units run side by side: the slower one bounds the call, their sum would not.
        compute_s = max(compute_s, amount / (peak * 1e12))
    compute_pct = memory_pct = math.nan
    if compute_s and finite(seconds):
        compute_pct = 100 * compute_s / seconds
    elif not flops and finite(row.achieved_tflops) and row.achieved_tflops > 0:
        # Only a claimed rate: compare it with the peak of the unit it claims to run on. A kernel
        # that claims no FLOPs (a gather, a copy) has no compute roof to miss.
        unit, precision = row.compute_unit or "cuda", row.precision or CUDA_CORE_PRECISION
        peak = _peak(spec, unit, precision)
        if peak:
            compute_pct = 100 * row.achieved_tflops / peak
        else:
            missing = f"{unit} {precision}"
    if nbytes and finite(seconds):
        memory_pct = 100 * nbytes / (spec.bandwidth_gbps * 1e9) / seconds
    elif finite(row.achieved_gbps):
        memory_pct = 100 * row.achieved_gbps / spec.bandwidth_gbps
    known = [p for p in (compute_pct, memory_pct) if finite(p)]
    return _Roof(max(known) if known else math.nan, compute_pct, memory_pct, missing)


def upper_bound_spec(spec: GpuSpec, spec_by_key: dict[str, GpuSpec] | None = None) -> GpuSpec:
    """The ceilings no kernel can beat: the spec itself, except that measured ceilings of a GPU the
    table knows are raised to the datasheet's where it is higher.

    A measured ceiling is what rooflint's own copy and matmul kernels reached, not a physical limit:
    a better kernel may pass it by more than the 5% tolerance, so above_roof judges against the
    higher of the two. A CPU's measured ceilings have no datasheet and stand as they are.
    """
    if spec.origin != "measured":
        return spec
    table = (spec_by_key or builtin_specs()).get(spec.key)
    if table is None or table.origin == "measured":
        return spec
    values = dict(spec.values)
    for name, item in table.values.items():
        is_ceiling = name == "memory_bandwidth_gbps" or name.endswith("_tflops")
        if is_ceiling and (name not in values or item.value > values[name].value):
            values[name] = item
    return replace(spec, values=values)


def gpu_key(name: str, spec_by_key: dict[str, GpuSpec] | None = None) -> str:
    """The GPU type a gpu column names, as a spec key ("H100", "h100" and "h100_sxm" are one GPU;
    so is a device name the table matches), else the name lowered; "" for no name."""
    from rooflint.core.specs import spec_key

    lowered = name.strip().lower().replace("-", "_").replace(" ", "_")
    if not lowered or (spec_by_key and lowered in spec_by_key):
        return lowered
    return spec_key(name) or lowered


def check_gpu(row: ResultRow, spec: GpuSpec, spec_by_key: dict[str, GpuSpec] | None = None) -> Finding | None:
    """Wrong GPU: the row was measured on one GPU and is judged against another's ceilings.

    Evidence is the row's gpu column and, where rooflint's table recognises it, its device name
    (a device name the table does not know, e.g. a CPU model, is no evidence either way).
    """
    claimed = [gpu_key(row.gpu, spec_by_key)] if row.gpu else []
    known = detect(row.device_name, spec_by_key) if row.device_name and spec.key != "cpu" else None
    if known:
        claimed.append(known.key)
    wrong = [c for c in claimed if c != spec.key]
    if not wrong:
        return None
    measured_on = row.device_name or row.gpu
    return Finding(
        Severity.ERROR,
        "wrong_gpu",
        f"measured on {measured_on} but judged against {spec.name} ({spec.key}): its ceilings do not apply; "
        f"lint with --gpu {wrong[0]}",
        row_label(row),
    )
