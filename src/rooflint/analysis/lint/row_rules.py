"""lint_row: every rule that judges one row against one GPU spec; lint_text: the `lint` column bench
writes from them.

The rules that live here: correctness_failed and not_measured (correctness_findings), power_capped,
fits_in_cache, no_ceiling, above_roof, far_below_roof, noisy and bytes_disagree, each with its
tolerance. lint_row also applies wrong_gpu (roof), throttled and shared_gpu (throttle) and
launch_bound (launch_bound).
"""

from __future__ import annotations

import math
import re

from rooflint.analysis.lint.findings import Finding, Severity, format_findings, row_label
from rooflint.analysis.lint.launch_bound import launch_bound_reason
from rooflint.analysis.lint.roof import check_gpu, recorded_spec, roof_position, upper_bound_spec
from rooflint.analysis.lint.throttle import boost_clock_mhz, shared_gpu_note, throttle_reason
from rooflint.core.fmt import finite
from rooflint.core.specs import GpuSpec
from rooflint.outputs.results import CRASHED, ERROR, FAILED, OK, OOM, POWER_CAPPED_NOTE, ResultRow

# Tolerances, with the reason for each value.
ABOVE_ROOF = 1.05  # 5% over the roof: timer jitter and boost clocks above the datasheet's stay below this
FAR_BELOW_ROOF = 0.10  # under 10% of attainable the roofline no longer explains the time
CACHE_FACTOR = 2.0  # a working set under 2x L2 may be partly served from L2 even after a flush
NOISY_SPREAD = 0.10  # p20..p80 wider than 10% of the median: the median is not a stable number
BYTES_DISAGREE = 0.25  # counters vs model: >25% means the model misses traffic (or invents it)


def lint_text(row: ResultRow, spec: GpuSpec | None = None) -> str:
    """The `lint` column for a row bench just measured, against ``spec`` or else the ceilings
    recorded in the row itself (what the worker judged it against)."""
    spec = spec or recorded_spec(row)
    return format_findings(lint_row(row, spec) if spec else correctness_findings(row))


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
    failed = correctness_findings(row)
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

    launch = launch_bound_reason(row)
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


def correctness_findings(row: ResultRow) -> list[Finding]:
    """not_measured for a row that was never timed (crashed, error, oom), correctness_failed for one
    marked failed or past its tolerance; [] for any other row."""
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
