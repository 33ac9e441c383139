"""Roofline lint: catch benchmark numbers that cannot be true, or cannot mean what they claim.

Each rule looks at one result row against one GPU spec and returns findings (severity, rule, a
one-line explanation). bench stores them in the CSV's `lint` column (format_findings); `rooflint
lint` checks a results file, rooflint's own or a plain CSV described in docs/lint.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rooflint.core.roofline import CUDA_CORE_PRECISION
from rooflint.core.specs import GpuSpec, detect
from rooflint.outputs.results import FAILED, OK, ResultRow

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITY_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}

# Tolerances, with the reason for each value.
ABOVE_ROOF = 1.05  # 5% over the roof: timer jitter and boost clocks above the datasheet's stay below this
FAR_BELOW_ROOF = 0.10  # under 10% of attainable the roofline no longer explains the time
CACHE_FACTOR = 2.0  # a working set under 2x L2 may be partly served from L2 even after a flush
NOISY_SPREAD = 0.10  # p20..p80 wider than 10% of the median: the median is not a stable number
BYTES_DISAGREE = 0.25  # counters vs model: >25% means the model misses traffic (or invents it)
# A PyTorch op costs about 5 us of host time (Python dispatch + cudaLaunchKernel) and a bare
# cudaLaunchKernel about 2-4 us. Event timing of a call shorter than three such launches may be
# mostly host time: the GPU idles between kernels and the events time the gaps.
LAUNCH_OVERHEAD_MS = 0.005
LAUNCH_BOUND_CALLS = 3
LAUNCH_SHARE = 0.25  # measured overhead (call - graph time) over a quarter of the call time


@dataclass(frozen=True)
class Finding:
    severity: str
    rule: str
    message: str
    row: str = ""  # the row's label: family/variant dtype shape

    def short(self) -> str:
        return f"{self.severity}:{self.rule}"


def row_label(row: ResultRow) -> str:
    parts = [p for p in (row.family, row.variant) if p]
    label = "/".join(parts)
    return " ".join(p for p in (label, row.dtype, row.shape) if p)


def format_findings(findings: list[Finding]) -> str:
    """The CSV `lint` column: "error:above_roof; warning:noisy" (most severe first)."""
    ordered = sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity])
    return "; ".join(f.short() for f in ordered)


def lint_text(row: ResultRow, spec: GpuSpec | None = None) -> str:
    """The `lint` column for a row bench just measured, against ``spec`` or else the ceilings
    recorded in the row itself (what the worker judged it against)."""
    spec = spec or recorded_spec(row)
    return format_findings(lint_row(row, spec) if spec else _correctness(row))


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _peak(spec: GpuSpec, unit: str, precision: str) -> float | None:
    return spec.tensor_peak_tflops(precision) if unit == "tensor" else spec.cuda_peak_tflops(precision)


def _precisions(row: ResultRow) -> tuple[str, str]:
    """(tensor precision, CUDA-core precision) the row's FLOPs run in.

    The row declares the precision of its dominant unit; the other unit takes rooflint's
    convention (CUDA-core math in fp32, tensor cores in the storage dtype).
    """
    tensor = row.precision if row.compute_unit == "tensor" and row.precision else row.dtype
    cuda = row.precision if row.compute_unit == "cuda" and row.precision else CUDA_CORE_PRECISION
    return tensor, cuda


@dataclass(frozen=True)
class _Roof:
    pct: float  # % of the attainable ceiling the row reaches
    compute_pct: float  # achieved FLOP/s over the unit's peak
    memory_pct: float  # achieved bytes/s over the bandwidth
    missing: str  # a peak the spec lacks ("tensor fp8"), or ""


def roof_position(row: ResultRow, spec: GpuSpec) -> _Roof:
    """Where the row sits under spec's roof, from its time and cost, or from its achieved rates.

    Recomputed here rather than read from pct_of_roof, so a file can be judged against any spec
    and a plain CSV (no pct column) gets the same maths.
    """
    tensor_precision, cuda_precision = _precisions(row)
    seconds = row.median_ms / 1e3 if _finite(row.median_ms) and row.median_ms > 0 else math.nan
    flops = (row.tensor_flops or 0.0) + (row.cuda_flops or 0.0)
    nbytes = row.ideal_bytes if _finite(row.ideal_bytes) else 0.0
    if not _finite(seconds) and flops and _finite(row.achieved_tflops) and row.achieved_tflops > 0:
        seconds = flops / (row.achieved_tflops * 1e12)
    if not _finite(seconds) and nbytes and _finite(row.achieved_gbps) and row.achieved_gbps > 0:
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
        compute_s += amount / (peak * 1e12)
    compute_pct = memory_pct = math.nan
    if compute_s and _finite(seconds):
        compute_pct = 100 * compute_s / seconds
    elif not flops and _finite(row.achieved_tflops) and row.achieved_tflops > 0:
        # Only a claimed rate: compare it with the peak of the unit it claims to run on. A kernel
        # that claims no FLOPs (a gather, a copy) has no compute roof to miss.
        unit, precision = row.compute_unit or "cuda", row.precision or CUDA_CORE_PRECISION
        peak = _peak(spec, unit, precision)
        if peak:
            compute_pct = 100 * row.achieved_tflops / peak
        else:
            missing = f"{unit} {precision}"
    if nbytes and _finite(seconds):
        memory_pct = 100 * nbytes / (spec.bandwidth_gbps * 1e9) / seconds
    elif _finite(row.achieved_gbps):
        memory_pct = 100 * row.achieved_gbps / spec.bandwidth_gbps
    known = [p for p in (compute_pct, memory_pct) if _finite(p)]
    return _Roof(max(known) if known else math.nan, compute_pct, memory_pct, missing)


def _gpu_key(name: str, spec_by_key: dict[str, GpuSpec] | None) -> str:
    """The spec key a row's gpu column refers to (key, alias or device name), else the lowered name."""
    from rooflint.core.errors import UserError
    from rooflint.core.specs import get_spec

    lowered = name.strip().lower().replace("-", "_").replace(" ", "_")
    if spec_by_key and lowered in spec_by_key:
        return lowered
    try:
        return get_spec(name).key
    except UserError:
        return lowered


def check_gpu(row: ResultRow, spec: GpuSpec, spec_by_key: dict[str, GpuSpec] | None = None) -> Finding | None:
    """Wrong GPU: the row was measured on one GPU and is judged against another's ceilings.

    Evidence is the row's gpu column and, where rooflint's table recognises it, its device name
    (a device name the table does not know, e.g. a CPU model, is no evidence either way).
    """
    claimed = [_gpu_key(row.gpu, spec_by_key)] if row.gpu else []
    known = detect(row.device_name, spec_by_key) if row.device_name and spec.key != "cpu" else None
    if known:
        claimed.append(known.key)
    wrong = [c for c in claimed if c != spec.key]
    if not wrong:
        return None
    measured_on = row.device_name or row.gpu
    return Finding(
        ERROR,
        "wrong_gpu",
        f"measured on {measured_on} but judged against {spec.name} ({spec.key}): its ceilings do not apply; "
        f"lint with --gpu {wrong[0]}",
        row_label(row),
    )


def lint_row(
    row: ResultRow,
    spec: GpuSpec,
    *,
    measured_dram_bytes: float = math.nan,
    spec_by_key: dict[str, GpuSpec] | None = None,
) -> list[Finding]:
    """Every finding for one row judged against ``spec``.

    measured_dram_bytes: DRAM bytes read + written per call from ncu counters (rooflint profile
    --ncu), where known. spec_by_key: the specs to resolve row.gpu with (default: the table).
    """
    label = row_label(row)
    findings: list[Finding] = []
    wrong = check_gpu(row, spec, spec_by_key)
    if wrong:
        findings.append(wrong)
    failed = _correctness(row)
    if failed:
        return findings + failed
    if row.status and row.status != OK:
        return findings  # skipped, oom, error, crashed: nothing was timed

    l2 = row.l2_bytes if row.l2_bytes else spec.l2_bytes
    fits = bool(l2 and _finite(row.ideal_bytes) and 0 < row.ideal_bytes < CACHE_FACTOR * l2)
    if fits:
        findings.append(
            Finding(
                WARNING,
                "fits_in_cache",
                f"working set {row.ideal_bytes / 2**20:.3g} MiB is under {CACHE_FACTOR:g}x the "
                f"{l2 / 2**20:.3g} MiB cache: the DRAM roof does not apply; use a size several times the cache",
                label,
            )
        )

    roof = roof_position(row, spec)
    if roof.missing:
        findings.append(
            Finding(WARNING, "no_ceiling", f"{spec.name} has no {roof.missing} peak to judge against", label)
        )
    if _finite(roof.pct) and roof.pct > 100 * ABOVE_ROOF:
        causes = []
        if fits or (_finite(roof.memory_pct) and roof.memory_pct > 100 * ABOVE_ROOF):
            causes.append("a cache-resident working set" + (" (it fits in cache)" if fits else ""))
        if _finite(roof.compute_pct) and roof.compute_pct > 100 * ABOVE_ROOF:
            causes.append(f"a wrong unit or precision ({row.compute_unit or 'cuda'} {row.precision or '?'} declared)")
            causes.append("a peak quoted with sparsity")
        causes.append("a wrong FLOP or byte count")
        findings.append(
            Finding(
                ERROR,
                "above_roof",
                f"{roof.pct:.0f}% of the attainable ceiling on {spec.name}: impossible; likely " + ", ".join(causes),
                label,
            )
        )
    elif _finite(roof.pct) and roof.pct < 100 * FAR_BELOW_ROOF:
        findings.append(
            Finding(
                INFO,
                "far_below_roof",
                f"{roof.pct:.1f}% of attainable: bound by latency, occupancy or launches, not by the roof",
                label,
            )
        )

    launch = _launch_bound(row)
    if launch:
        findings.append(Finding(WARNING, "launch_bound", launch, label))
    if _finite(row.p20_ms) and _finite(row.p80_ms) and _finite(row.median_ms) and row.median_ms > 0:
        spread = (row.p80_ms - row.p20_ms) / row.median_ms
        if spread > NOISY_SPREAD:
            findings.append(
                Finding(
                    WARNING,
                    "noisy",
                    f"p20-p80 spread is {100 * spread:.0f}% of the median (> {100 * NOISY_SPREAD:.0f}%): "
                    "rerun on an idle machine or with more samples",
                    label,
                )
            )
    analytic = row.modeled_bytes if _finite(row.modeled_bytes) and row.modeled_bytes > 0 else row.ideal_bytes
    if _finite(measured_dram_bytes) and measured_dram_bytes > 0 and _finite(analytic) and analytic > 0:
        ratio = measured_dram_bytes / analytic
        if abs(ratio - 1) > BYTES_DISAGREE:
            findings.append(
                Finding(
                    WARNING,
                    "bytes_disagree",
                    f"counters measured {measured_dram_bytes / 2**20:.4g} MiB of DRAM traffic, the model says "
                    f"{analytic / 2**20:.4g} MiB ({ratio:.2f}x): the model misses traffic, or the data hit in L2",
                    label,
                )
            )
    return findings


def _correctness(row: ResultRow) -> list[Finding]:
    if row.status == FAILED or (_finite(row.rel_error) and _finite(row.tolerance) and row.rel_error > row.tolerance):
        detail = (
            f"relative error {row.rel_error:.3g} > tolerance {row.tolerance:.3g}"
            if _finite(row.rel_error)
            else (row.message or "marked failed")
        )
        return [Finding(ERROR, "correctness_failed", f"{detail}: its times and rates mean nothing", row_label(row))]
    return []


def _launch_bound(row: ResultRow) -> str:
    if row.timing_mode == "cuda_graph":
        if _finite(row.launch_overhead_ms) and _finite(row.median_ms) and row.median_ms > 0:
            call_ms = row.median_ms + row.launch_overhead_ms
            if row.launch_overhead_ms > LAUNCH_SHARE * call_ms:
                return (
                    f"launch overhead is {100 * row.launch_overhead_ms / call_ms:.0f}% of a call "
                    f"({1e3 * row.launch_overhead_ms:.1f} us): without graphs this kernel is launch-bound"
                )
        return ""  # graph timing already excludes launch gaps
    if not _finite(row.median_ms) or row.median_ms <= 0:
        return ""
    limit = LAUNCH_BOUND_CALLS * LAUNCH_OVERHEAD_MS
    if row.median_ms < limit:
        advice = "time it with bench --cuda-graphs" if row.timing_mode != "cpu_wall" else "use a larger size"
        return (
            f"median {1e3 * row.median_ms:.1f} us is under {LAUNCH_BOUND_CALLS} launch overheads "
            f"({1e3 * limit:.0f} us): the time may be mostly launch; {advice}"
        )
    return ""


def recorded_spec(row: ResultRow) -> GpuSpec | None:
    """The ceilings a rooflint row was judged against when measured (CPU rows: measured at start)."""
    from rooflint.core.specs import measured_spec

    if not _finite(row.bandwidth_gbps) or row.bandwidth_gbps <= 0:
        return None
    peaks: dict[str, float] = {}
    if _finite(row.peak_tflops) and row.peak_tflops > 0:
        tensor, cuda = _precisions(row)
        peaks = {f"tensor_{tensor}_tflops": row.peak_tflops, f"cuda_{cuda}_tflops": row.peak_tflops}
    if row.l2_bytes:
        peaks["l2_mib"] = row.l2_bytes / 2**20
    spec = measured_spec(
        row.gpu or "recorded",
        f"{row.gpu or 'recorded'} (ceilings recorded in the file)",
        row.bandwidth_gbps,
        peaks,
        "recorded in the results file",
    )
    return spec


def lint_file(
    path,
    *,
    gpu: str | None = None,
    spec_file=None,
    roof: str = "datasheet",
    counters=None,
) -> list[tuple[ResultRow, list[Finding]]]:
    """Lint every row of a results file (rooflint's or a plain CSV) against --gpu or each row's own GPU.

    Without --gpu a row is judged against the spec its gpu column names; a CPU row, or a GPU the
    table lacks, against the ceilings recorded in the row (what bench used when it measured it).
    """
    from rooflint.analysis.lint_input import read_counters, read_lint_input
    from rooflint.core.errors import UserError
    from rooflint.core.roofs import roof_spec
    from rooflint.core.specs import all_specs, get_spec

    data = read_lint_input(path)
    measured = list(data.measured_dram_bytes)
    if counters:
        by_key = read_counters(counters)
        for i, row in enumerate(data.rows):
            found = by_key.get((row.family, row.variant, row.dtype, row.shape))
            if found is not None:
                measured[i] = found
    specs = all_specs(spec_file)
    fixed = roof_spec(get_spec(gpu, spec_file), roof) if gpu else None
    cache: dict[str, GpuSpec | None] = {}
    out = []
    for row, dram in zip(data.rows, measured):
        spec = fixed
        if spec is None:
            if not row.gpu:
                raise UserError(f"{path}: row {row_label(row)!r} names no gpu; add a gpu column or pass --gpu")
            if row.gpu not in cache:
                try:
                    cache[row.gpu] = get_spec(row.gpu, spec_file) if row.gpu != "cpu" else None
                except UserError:
                    cache[row.gpu] = None
                if cache[row.gpu] is not None:
                    cache[row.gpu] = roof_spec(cache[row.gpu], roof)
            spec = cache[row.gpu] or recorded_spec(row)
            if spec is None and row.status != OK:
                out.append((row, _correctness(row)))  # nothing was timed: no ceiling needed
                continue
            if spec is None:
                raise UserError(
                    f"{path}: unknown GPU {row.gpu!r}; valid: {', '.join(specs)}, or describe it with --spec-file"
                )
        out.append((row, lint_row(row, spec, measured_dram_bytes=dram, spec_by_key=specs)))
    return out
