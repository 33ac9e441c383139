"""Roofline lint: catch benchmark numbers that cannot be true, or cannot mean what they claim.

Each rule looks at one result row against one GPU spec and returns findings (severity, rule, a
one-line explanation). bench stores them in the CSV's `lint` column (format_findings); `rooflint
lint` checks a results file, rooflint's own or a plain CSV described in docs/lint.md, and adds the
one rule that reads two rows: clock_mismatch, a speedup against the family's baseline row timed at
another SM clock.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from rooflint.core.fmt import finite
from rooflint.core.roofline import CUDA_CORE_PRECISION
from rooflint.core.specs import GpuSpec, builtin_specs, detect, spec_from_rows, unit_precisions
from rooflint.outputs.results import CRASHED, ERROR, FAILED, OK, OOM, POWER_CAPPED_NOTE, SHARED_GPU_NOTE, ResultRow


class Severity:
    """How bad a finding is (a result row's status is another thing: rooflint.outputs.results)."""

    ERROR = "error"  # the number cannot be true, or is not what it claims: `rooflint lint` exits 1
    WARNING = "warning"  # the number may not mean what it seems
    INFO = "info"


SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}

# Tolerances, with the reason for each value.
ABOVE_ROOF = 1.05  # 5% over the roof: timer jitter and boost clocks above the datasheet's stay below this
FAR_BELOW_ROOF = 0.10  # under 10% of attainable the roofline no longer explains the time
CACHE_FACTOR = 2.0  # a working set under 2x L2 may be partly served from L2 even after a flush
NOISY_SPREAD = 0.10  # p20..p80 wider than 10% of the median: the median is not a stable number
BYTES_DISAGREE = 0.25  # counters vs model: >25% means the model misses traffic (or invents it)
# A PyTorch op costs about 5 us of host time (Python dispatch + cudaLaunchKernel) and a bare
# cudaLaunchKernel about 2-4 us. A time that includes the host's launches and is shorter than
# three such launches may be mostly host time: the GPU idles between kernels and the timer counts it.
LAUNCH_OVERHEAD_MS = 0.005
LAUNCH_BOUND_CALLS = 3
LAUNCH_SHARE = 0.25  # measured overhead (call - graph time) over a quarter of the call time
# Timing modes whose time is the GPU's alone. cuda_events: every call waits queued behind a spin
# kernel until its start event fires, so host launch gaps never reach the timer; cuda_graph: a
# replay launches once for many calls. Other modes (cpu_wall, cuda_events_stream: calls launched
# back to back from Python) and a plain table's unstated timing include the host's launches.
DEVICE_TIME_MODES = ("cuda_events", "cuda_graph")
# A clock under 90% of the boost clock makes every SM-bound time 10%+ slower than the GPU's own
# speed: more than the noise compare forgives. The same share as bench's throttle check.
THROTTLED_CLOCK = 0.90
# Two rows whose SM clocks are 5% apart: a compute-bound time moves about as much with the clock
# alone, so a speedup between them near 1.0x says as much about the clocks as about the kernels. In
# the burst regime each row runs at the clock its power allows: at the power cap the first row of a
# shape can hold 1,980 MHz and a later one 1,845 (reports/h200 at 8112a9e). In the sustained regime
# the rule stays quiet: there every row runs at the power cap, and the clock a row holds is its own
# kernel's doing (a kernel that does more per cycle draws more power per cycle, so the cap holds it
# to a lower clock), so a speedup between two sustained rows is a fair ratio of work per joule at the
# cap (the sustained H100 run at 58f16dd: `triton_gluon` at 1,620 MHz, cuDNN at 1,770, both at ~690 W:
# 1.000x; docs/perf-notes/attention.md).
CLOCKS_APART = 0.05


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


def boost_clock_mhz(
    row: ResultRow, spec: GpuSpec | None = None, spec_by_key: dict[str, GpuSpec] | None = None
) -> float | None:
    """The boost clock of the GPU that measured the row: the spec its gpu column names, else (a GPU
    no spec knows, a plain CSV judged with --gpu) the judging ``spec``; None where it has none."""
    specs = spec_by_key or builtin_specs()
    own = specs.get(gpu_key(row.gpu, spec_by_key)) if row.gpu else None
    source = own or spec
    return source.get("boost_clock_mhz") if source is not None else None


def throttle_reason(row: ResultRow, boost_mhz: float | None) -> str:
    """Why the row's time is not what this GPU does when healthy, or "" when nothing says so.

    - bench marked the row throttled (schema 2: NVML clocks under 90% of the clock the GPU held
      under load at the start of the run, or a thermal/hardware slowdown, after its re-timings);
    - or, for a row whose clocks bench did not sample through NVML (today's schema-1 files record
      one nvidia-smi read of sm_clock_mhz; other tools' tables), its SM clock is under 90% of the
      GPU's boost clock. Rows NVML sampled keep bench's verdict: its reference is the clock this
      GPU really holds under load, which on power-limited parts is below boost when healthy.
      Sustained rows run at the power cap by design, so the boost clock does not judge them either.
    """
    reasons = (
        f"clock events: {row.clock_event_reasons.replace(';', ', ')}"
        if row.clock_event_reasons
        else "no clock_event_reasons recorded"
    )
    clock = f"SM clock {row.sm_clock_mhz:.0f} MHz" if finite(row.sm_clock_mhz) else "SM clock not recorded"
    if finite(row.sm_clock_min_mhz):
        clock += f" (min {row.sm_clock_min_mhz:.0f})"
    if row.throttled:
        retries = f" after {row.throttle_retries} re-timings" if row.throttle_retries else ""
        return f"bench marked it throttled{retries}: {clock}; {reasons}"
    if finite(row.sm_clock_min_mhz) or row.regime == "sustained":
        return ""
    if finite(row.sm_clock_mhz) and boost_mhz and row.sm_clock_mhz < THROTTLED_CLOCK * boost_mhz:
        return (
            f"{clock} is {100 * row.sm_clock_mhz / boost_mhz:.0f}% of the {boost_mhz:.0f} MHz boost clock "
            f"(< {100 * THROTTLED_CLOCK:.0f}%), {reasons}: its power cap (dense tensor-core work reaches it), "
            "heat or another process slowed the GPU"
        )
    return ""


def working_set_bytes(row: ResultRow) -> float:
    """The bytes one call touches. A model's op row (timed by the profiler) sums every call of the
    op over a step, "calls=N" in its message (models/engine.op_rows), and one call's inputs may
    still sit in L2 from the op that wrote them: GPT-2's residual add reads two 12.6 MB activations
    written just before it, so it can beat the HBM roof without any error in its count."""
    if row.timing_mode.startswith("profiler") and finite(row.ideal_bytes):
        calls = re.search(r"(?:^|; )calls=(\d+)", row.message or "")
        if calls and int(calls.group(1)) > 0:
            return row.ideal_bytes / int(calls.group(1))
    return row.ideal_bytes


def shared_gpu_note(row: ResultRow) -> str:
    """The row's note that NVML saw another process computing on its GPU while it was timed, or "".

    Its SMs were shared, so its time says as little about its code as a throttled clock: beside a
    matmul load on an H100, rows ran 2-2.6x slower at clocks bench did not call throttled
    (reports/throttle)."""
    at = row.message.find(SHARED_GPU_NOTE)
    return row.message[at:][:120] if at >= 0 else ""


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

    throttled = throttle_reason(row, boost_clock_mhz(row, spec, spec_by_key))
    if throttled:
        findings.append(
            Finding(
                Severity.ERROR,
                "throttled",
                f"{throttled}; the time reflects the clock, not the kernel: rerun on an idle, cool GPU",
                label,
            )
        )

    if not throttled and POWER_CAPPED_NOTE in row.message:
        findings.append(
            Finding(
                Severity.INFO,
                "power_capped",
                "held at the GPU's power cap by its own compute-bound load, in every timing: its time is this "
                "kernel's at the cap, reproducible and compared as such (--regime sustained times every row there)",
                label,
            )
        )

    if not throttled and shared_gpu_note(row):
        findings.append(
            Finding(
                Severity.WARNING,
                "shared_gpu",
                "timed while another process computed on this GPU: its time includes the neighbour's; "
                "rerun on a GPU no one else uses (rooflint doctor lists other processes)",
                label,
            )
        )

    l2 = row.l2_bytes if row.l2_bytes else spec.l2_bytes
    working_set = working_set_bytes(row)
    fits = bool(l2 and finite(working_set) and 0 < working_set < CACHE_FACTOR * l2)
    roof = roof_position(row, spec)
    bound_spec = upper_bound_spec(spec, spec_by_key)
    bound = roof if bound_spec is spec else roof_position(row, bound_spec)
    # A model's op fits in cache per call, but whether its bytes were in L2 depends on the ops
    # before it (a decode step's weights stream from HBM): say so only where the time shows it.
    served_from_cache = finite(bound.memory_pct) and bound.memory_pct > 100 * ABOVE_ROOF
    if fits and (not row.timing_mode.startswith("profiler") or served_from_cache):
        findings.append(
            Finding(
                Severity.WARNING,
                "fits_in_cache",
                f"working set {working_set / 2**20:.3g} MiB is under {CACHE_FACTOR:g}x the "
                f"{l2 / 2**20:.3g} MiB cache: the DRAM roof does not apply; use a size several times the cache",
                label,
            )
        )

    if roof.missing:
        findings.append(
            Finding(Severity.WARNING, "no_ceiling", f"{spec.name} has no {roof.missing} peak to judge against", label)
        )
    # A cache-resident working set is not bound by DRAM (fits_in_cache says so): only its compute
    # floor can prove a time impossible.
    judged = bound.compute_pct if fits else bound.pct
    if finite(judged) and judged > 100 * ABOVE_ROOF:
        causes = []
        if bound_spec.origin == "measured" and bound_spec is spec:
            # A CPU run measures its ceilings at its start (the fastest of a few samples): a machine
            # busy then (a CI job beside it) gives a low roof that later rows pass. Seen on a 2-core
            # box with tests running beside `bench all`: gelu_linear's unfused rows at 210%. Only
            # where the measured ceilings stand alone: where a datasheet lies under them (a GPU the
            # table knows), a low measurement never lowers the roof judged here.
            causes.append("a ceiling measured while the machine was busy (rerun on an idle machine)")
        if fits or (finite(bound.memory_pct) and bound.memory_pct > 100 * ABOVE_ROOF):
            causes.append("a cache-resident working set" + (" (it fits in cache)" if fits else ""))
        if finite(bound.compute_pct) and bound.compute_pct > 100 * ABOVE_ROOF:
            causes.append(f"a wrong unit or precision ({row.compute_unit or 'cuda'} {row.precision or '?'} declared)")
            causes.append("a peak quoted with sparsity")
        causes.append("a wrong FLOP or byte count")
        ceilings = "" if bound_spec is spec else " (the higher of its datasheet and measured ceilings)"
        findings.append(
            Finding(
                Severity.ERROR,
                "above_roof",
                f"{judged:.0f}% of the attainable ceiling on {spec.name}{ceilings}: impossible; likely "
                + ", ".join(causes),
                label,
            )
        )
    elif finite(roof.pct) and roof.pct < 100 * FAR_BELOW_ROOF:
        findings.append(
            Finding(
                Severity.INFO,
                "far_below_roof",
                f"{roof.pct:.1f}% of attainable: bound by latency, occupancy or launches, not by the roof",
                label,
            )
        )

    launch = _launch_bound(row)
    if launch:
        findings.append(Finding(Severity.WARNING, "launch_bound", launch, label))
    if finite(row.p20_ms) and finite(row.p80_ms) and finite(row.median_ms) and row.median_ms > 0:
        spread = (row.p80_ms - row.p20_ms) / row.median_ms
        if spread > NOISY_SPREAD:
            findings.append(
                Finding(
                    Severity.WARNING,
                    "noisy",
                    f"p20-p80 spread is {100 * spread:.0f}% of the median (> {100 * NOISY_SPREAD:.0f}%): "
                    "rerun on an idle machine or with more samples",
                    label,
                )
            )
    analytic = row.modeled_bytes if finite(row.modeled_bytes) and row.modeled_bytes > 0 else row.ideal_bytes
    if finite(measured_dram_bytes) and measured_dram_bytes > 0 and finite(analytic) and analytic > 0:
        ratio = measured_dram_bytes / analytic
        if abs(ratio - 1) > BYTES_DISAGREE:
            findings.append(
                Finding(
                    Severity.WARNING,
                    "bytes_disagree",
                    f"counters measured {measured_dram_bytes / 2**20:.4g} MiB of DRAM traffic, the model says "
                    f"{analytic / 2**20:.4g} MiB ({ratio:.2f}x): the model misses traffic, or the data hit in L2",
                    label,
                )
            )
    return findings


def _correctness(row: ResultRow) -> list[Finding]:
    if row.status in (CRASHED, ERROR, OOM):
        why = row.message.splitlines()[0][:160] if row.message else "no message"
        return [Finding(Severity.ERROR, "not_measured", f"{row.status}: {why}", row_label(row))]
    if row.status == FAILED or (finite(row.rel_error) and finite(row.tolerance) and row.rel_error > row.tolerance):
        detail = (
            f"relative error {row.rel_error:.3g} > tolerance {row.tolerance:.3g}"
            if finite(row.rel_error)
            else (row.message or "marked failed")
        )
        return [
            Finding(Severity.ERROR, "correctness_failed", f"{detail}: its times and rates mean nothing", row_label(row))
        ]
    return []


def _launch_bound(row: ResultRow) -> str:
    """Launch-bound, judged on what the row's time includes.

    Where the launch overhead was measured (bench --cuda-graphs: back-to-back calls from Python
    minus CUDA-graph replay, per call), it decides. A device-time row without that measurement says
    nothing about launches, however short it is. A time that includes the host's launches (CPU wall
    clock, calls launched back to back, a table that does not say) may be mostly launch when it is
    under three launch overheads.
    """
    median, overhead = row.median_ms, row.launch_overhead_ms
    if finite(overhead) and finite(median) and median > 0:
        call_ms = median + overhead
        if overhead > LAUNCH_SHARE * call_ms:
            return (
                f"launch overhead is {100 * overhead / call_ms:.0f}% of a call launched from Python "
                f"({1e3 * overhead:.1f} us): without CUDA graphs this kernel is launch-bound"
            )
        return ""
    if row.timing_mode in DEVICE_TIME_MODES or not finite(median) or median <= 0:
        return ""
    limit = LAUNCH_BOUND_CALLS * LAUNCH_OVERHEAD_MS
    if median < limit:
        advice = "use a larger size" if row.timing_mode == "cpu_wall" else "measure it with bench --cuda-graphs"
        what = f"{row.timing_mode} time" if row.timing_mode else "time (which includes launches, unless stated)"
        return (
            f"median {1e3 * median:.1f} us {what} is under {LAUNCH_BOUND_CALLS} launch overheads "
            f"({1e3 * limit:.0f} us): the time may be mostly launch; {advice}"
        )
    return ""


def baseline_variant(family: str) -> str | None:
    """The variant a registered family's speedup_vs_eager divides by (None: no such family here)."""
    from rooflint.core.errors import UserError
    from rooflint.core.registry import get_family

    try:
        baseline = get_family(family).baseline
    except UserError:
        return None
    return baseline.name if baseline is not None else None


def clock_mismatch(row: ResultRow, baseline: ResultRow) -> Finding | None:
    """A warning where ``row``'s speedup_vs_eager spans SM clocks CLOCKS_APART or more apart and is
    near enough 1.0x that the clocks alone could account for it."""
    if row is baseline or not finite(row.speedup_vs_eager):
        return None
    if row.regime == baseline.regime == "sustained":  # both at the power cap: the clocks are the kernels'
        return None
    clock, base = row.sm_clock_mhz, baseline.sm_clock_mhz
    if not (finite(clock) and finite(base) and min(clock, base) > 0):
        return None
    apart = max(clock, base) / min(clock, base) - 1
    # Only a speedup the clocks could explain (within twice their gap of 1.0x): 0.05x is the kernels.
    if apart < CLOCKS_APART or abs(row.speedup_vs_eager - 1) > 2 * apart:
        return None
    return Finding(
        Severity.WARNING,
        "clock_mismatch",
        f"timed at {clock:.0f} MHz, its baseline {baseline.variant} at {base:.0f} MHz ({100 * apart:.0f}% "
        f"apart): its {row.speedup_vs_eager:.3f}x says as much about the clocks as about the kernels; hold it "
        "against a row timed at the same clock, or run --regime sustained, where every row runs at the power cap",
        row_label(row),
    )


def _clock_findings(rows: list[ResultRow]) -> dict[int, Finding]:
    """clock_mismatch for each row of a file whose family's baseline row is in the same file, by index."""
    timed = [(i, row) for i, row in enumerate(rows) if row.status == OK and finite(row.sm_clock_mhz)]
    # Looking a baseline up imports its family (torch, the kernels: ~1 s): only for rows with a clock,
    # so CPU results and plain tables are linted without it.
    names = {family: baseline_variant(family) for family in {row.family for _, row in timed}}

    def case(row: ResultRow) -> tuple:
        return row.family, row.dtype, row.shape, row.gpu

    baselines = {case(row): row for _, row in timed if row.variant == names[row.family]}
    found = {}
    for i, row in timed:
        baseline = baselines.get(case(row))
        finding = clock_mismatch(row, baseline) if baseline is not None else None
        if finding:
            found[i] = finding
    return found


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
    from rooflint.core.roofs import ROOF_CHOICES, roof_spec
    from rooflint.core.specs import all_specs, get_spec

    if roof not in ROOF_CHOICES:  # checked up front: a file of CPU rows would never ask for a roof
        raise UserError(f"unknown roof {roof!r}; valid: {', '.join(ROOF_CHOICES)}")
    # `--gpu ""` (an unset shell variable) is an unknown GPU, not "each row's own": it must not drop wrong_gpu.
    fixed = roof_spec(get_spec(gpu, spec_file), roof) if gpu is not None else None
    data = read_lint_input(path)
    if not data.rows:
        # A header alone (a run killed before its first row) has nothing to judge: "clean" would pass a CI gate.
        raise UserError(f"no result rows in {path}; lint a results file that holds rows")
    measured = list(data.measured_dram_bytes)
    if counters:
        by_key = read_counters(counters)
        joined = 0
        for i, row in enumerate(data.rows):
            found = by_key.get((row.family, row.variant, row.dtype, row.shape))
            if found is not None:
                measured[i] = found
                joined += 1
        if not joined:  # counters of another run (or none): the rule they enable would pass unapplied
            raise UserError(
                f"--counters {counters}: no row of {path} has counters there (joined on family, variant, dtype "
                "and shape); give the ncu.csv of `rooflint profile --ncu` for these rows"
            )
    specs = all_specs(spec_file)
    cache: dict[str, GpuSpec | None] = {}
    # A timed row that recorded no ceilings of its own (a model run's whole-generation row) is judged
    # against those its run recorded on the same GPU, as the report draws it.
    by_gpu: dict[str, GpuSpec | None] = {}

    def recorded_on(gpu: str) -> GpuSpec | None:
        if gpu not in by_gpu:
            by_gpu[gpu] = spec_from_rows(gpu, [r for r in data.rows if r.gpu == gpu], spec_file)
        return by_gpu[gpu]

    clocks = _clock_findings(data.rows)  # the one rule that reads two rows: a speedup and its baseline
    out = []
    for i, (row, dram) in enumerate(zip(data.rows, measured)):
        spec = fixed
        if spec is None:
            if not row.gpu and row.status != OK:
                out.append((row, _correctness(row)))  # nothing timed (a crash in an older file): no roof needed
                continue
            # A timed row whose gpu cell is empty (the report draws it, under "unknown GPU") is judged
            # against the GPU its device name names, else the ceilings it recorded; one with neither (a
            # plain CSV without a gpu column) has no roof to be judged against.
            gpu = row.gpu
            if not gpu and row.device_name:
                known = detect(row.device_name, specs)
                gpu = known.key if known else ""
            if not gpu:
                spec = recorded_spec(row)
                if spec is None:
                    raise UserError(f"{path}: row {row_label(row)!r} names no gpu; add a gpu column or pass --gpu")
            else:
                if gpu not in cache:
                    try:
                        cache[gpu] = get_spec(gpu, spec_file) if gpu != "cpu" else None
                    except UserError:
                        cache[gpu] = None
                    if cache[gpu] is not None:
                        cache[gpu] = roof_spec(cache[gpu], roof)
                spec = cache[gpu] or recorded_spec(row) or recorded_on(gpu)
            if spec is None and row.status != OK:
                out.append((row, _correctness(row)))  # nothing was timed: no ceiling needed
                continue
            if spec is None:
                raise UserError(
                    f"{path}: unknown GPU {row.gpu!r}; valid: {', '.join(specs)}, or describe it with --spec-file"
                )
        findings = lint_row(row, spec, measured_dram_bytes=dram, spec_by_key=specs)
        out.append((row, findings + [clocks[i]] if i in clocks else findings))
    return out
