"""rooflint profile: which kernels each variant launches (torch.profiler), and what the hardware
counted while they ran (Nsight Compute, --ncu).

The kernel list is the proof of fusion: an unfused chain launches one kernel per op and each one
re-reads the tensor from DRAM; a fused variant launches one. The ncu counters are the second
witness for the roofline: measured DRAM bytes and FLOPs beside the analytic model's.
"""

from __future__ import annotations

import gc
import json
import math
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rooflint.analysis import limiter
from rooflint.analysis import ncu as ncu_tools
from rooflint.analysis import sass as sass_tools
from rooflint.core.errors import UserError, VariantSkipped, describe
from rooflint.core.family import Case, Family, Variant
from rooflint.core.registry import get_family
from rooflint.core.selection import check_variant_names, in_asked_order, select_variants
from rooflint.engine.correctness import check
from rooflint.engine.kineto_log import without_usdt_lines
from rooflint.engine.profile_flags import NO_NCU, check_flags
from rooflint.engine.timing import nvtx_range
from rooflint.outputs.results import ERROR, FAILED, FAILING_STATUSES, OK, SKIPPED, read_typed_csv, write_typed_csv

PROFILED_CALLS = 5  # calls under torch.profiler: enough to average, few enough to stay fast
# What a profile looks at when the user says nothing: the family's first default dtype (bf16, or a
# quantized family's own format) and the first shape of the small preset (ncu replays every kernel
# dozens of times, so the large size costs minutes per variant).
DEFAULT_SIZE = "small"
DEFAULT_OUT = Path("rooflint-out/profile")


@dataclass
class KernelShare:
    variant: str
    kernel: str
    calls_per_call: float  # launches of this kernel per variant call
    device_us_per_call: float
    share_pct: float
    # A variant that failed its float64 check, raised, or cannot run here has one row saying so
    # (kernel empty, numbers NaN) and is never profiled: every variant asked for is in kernels.csv.
    status: str = OK
    message: str = ""


def build(family: Family, variant: Variant, size: str, dtype: str, device: str) -> tuple[Case, Any]:
    if dtype not in family.dtypes:
        raise UserError(f"{family.name} has no dtype {dtype!r}; valid: {', '.join(family.dtypes)}")
    preset, params = family.cases(size)[0]
    case = family.build_case(preset, params, dtype, torch.device(device))
    return case, variant.build(case)


def not_profiled(variant: str, status: str, message: str) -> KernelShare:
    """The row of a variant that was not profiled, and why."""
    return KernelShare(variant, "", math.nan, math.nan, math.nan, status, message)


def checked(fam: Family, variant: Variant, dtype: str, fn, reference) -> KernelShare | None:
    """Run ``fn`` once against the float64 reference, as bench's gate does: None when it passes,
    else the variant's failed or error row. A wrong kernel's kernel list proves nothing."""
    try:
        verdict = check(fam, dtype, fn(), reference)
    except Exception as error:  # noqa: BLE001 - a broken variant is a row, not the end of the profile
        return not_profiled(variant.name, ERROR, describe(error))
    return None if verdict.passed else not_profiled(variant.name, FAILED, verdict.message)


def kernel_shares(fn, device: str, variant: str, calls: int = PROFILED_CALLS) -> list[KernelShare]:
    """Device activity (kernels, memsets, copies) of ``calls`` calls of fn, per call.

    On CPU there are no kernels; the top-level ops stand in: each ATen op is one pass over memory,
    and a torch.compile region appears as one entry.
    """
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):  # compile, autotune and allocate before profiling
        fn()
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    with without_usdt_lines(), profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        if cuda:
            torch.cuda.synchronize()
    totals: dict[str, list[float]] = {}
    for event in prof.events():
        if cuda and event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if not cuda and event.cpu_parent is not None:
            continue  # CPU: top-level ops only (an ATen op, or a compiled region standing for its fused kernels)
        entry = totals.setdefault(event.name, [0, 0.0])
        entry[0] += 1
        entry[1] += event.time_range.elapsed_us()
    grand = sum(t for _, t in totals.values()) or 1.0
    shares = [
        KernelShare(variant, name, count / calls, us / calls, 100 * us / grand) for name, (count, us) in totals.items()
    ]
    return sorted(shares, key=lambda s: -s.share_pct)


# ---------------------------------------------------------------------------- ncu child process


def child_main() -> None:
    """`python -m rooflint.engine.profile JOB_JSON`: run one variant once inside its NVTX range, for ncu."""
    job = json.loads(sys.argv[1])
    family = get_family(job["family"])
    variant = family.variants[job["variant"]]
    _, fn = build(family, variant, job["size"], job["dtype"], "cuda")
    for _ in range(3):  # compile, autotune, first-call allocations: outside the profiled range
        fn()
    torch.cuda.synchronize()
    with nvtx_range("/".join((job["family"], job["variant"], job["dtype"], job["size"]))):
        for _ in range(job.get("calls", 1)):
            fn()
        torch.cuda.synchronize()


@dataclass
class NcuRow:
    family: str
    variant: str
    kind: str
    dtype: str
    size: str
    shape: str
    kernels: int
    time_ms: float
    analytic_flops: float
    ideal_bytes: float
    modeled_bytes: float
    measured_dram_read_bytes: float
    measured_dram_write_bytes: float
    measured_dram_bytes: float
    measured_l2_bytes: float
    measured_flops: float
    flops_source: str  # counters | analytic (counters read zero)
    bytes_ratio: float  # measured DRAM / analytic (modeled where declared, else ideal)
    analytic_ai: float  # analytic FLOPs over analytic bytes (modeled where declared)
    measured_ai: float  # counted FLOPs over DRAM bytes
    notes: str
    # Why it falls short (analysis/limiter.py): the counters of the range's longest kernel.
    main_kernel: str
    main_kernel_share_pct: float
    dram_pct: float  # of DRAM's sustained peak
    sm_pct: float  # the busiest SM unit's share of its peak
    issue_pct: float  # warp schedulers' issue slots busy
    tensor_pipe_pct: float
    xu_pct: float  # MUFU: exp2, rsqrt, sin/cos
    occupancy_pct: float  # achieved: active warps over the SM's maximum
    registers: float  # per thread
    block: float
    grid: float
    smem_bytes: float  # per block, static and dynamic
    instructions: float  # warp instructions executed
    cycles_per_issue: float  # warp cycles between two issued instructions
    top_stalls: str  # "reason cycles-per-instruction, ..." largest first
    limiter: str
    # The L2 slices' bytes per byte the SMs received from the L2 (ncu.SM_FROM_L2): near 1 (or above,
    # with writes) when each SM's reads are served apart, below 1 when several SMs' reads of the same
    # lines are served once. NaN where the GPU's ncu has no such counter, or in an older ncu.csv.
    l2_per_sm_byte: float = math.nan


def ncu_row(family: Family, variant: Variant, dtype: str, size: str, counters, time_ms: float) -> NcuRow:
    preset, params = family.cases(size)[0]
    cost = family.cost(params, dtype)
    modeled = float(variant.modeled_bytes(params, dtype)) if variant.modeled_bytes else math.nan
    measured = ncu_tools.aggregate(counters)
    notes = list(measured.notes)
    counted = measured.cuda_flops + (measured.tensor_ops if math.isfinite(measured.tensor_ops) else 0.0)
    if math.isfinite(counted) and counted > 0:
        flops, source = counted, "counters"
    else:
        flops, source = cost.flops, "analytic"
        notes.append("FLOP counters read zero: measured AI uses the analytic FLOPs")
    analytic_bytes = modeled if math.isfinite(modeled) else cost.bytes
    dram = measured.dram_bytes
    from rooflint.core.family import shape_label

    return NcuRow(
        family=family.name,
        variant=variant.name,
        kind=variant.kind,
        dtype=dtype,
        size=preset,
        shape=shape_label(params),
        kernels=measured.kernels,
        time_ms=time_ms,
        analytic_flops=cost.flops,
        ideal_bytes=cost.bytes,
        modeled_bytes=modeled,
        measured_dram_read_bytes=measured.dram_read_bytes,
        measured_dram_write_bytes=measured.dram_write_bytes,
        measured_dram_bytes=dram,
        measured_l2_bytes=measured.l2_bytes,
        measured_flops=flops,
        flops_source=source,
        bytes_ratio=dram / analytic_bytes if analytic_bytes and math.isfinite(dram) else math.nan,
        analytic_ai=cost.flops / analytic_bytes if analytic_bytes else math.nan,
        measured_ai=flops / dram if dram and math.isfinite(dram) else math.nan,
        notes="; ".join(notes),
        **limiter.columns(limiter.explain(counters)),
        l2_per_sm_byte=measured.l2_bytes / measured.sm_from_l2_bytes if measured.sm_from_l2_bytes > 0 else math.nan,
    )


def run_ncu(
    family: Family, variant: Variant, dtype: str, size: str, out_dir: Path, metrics: list[str], sass: bool = False
):
    """Profile one variant under ncu; returns the per-kernel counters of its NVTX range and, with
    ``sass``, its main kernel's SASS with the stall samples (else None)."""
    ncu = ncu_tools.ncu_path()
    if ncu is None:
        raise UserError(NO_NCU)
    stem = f"{family.name}-{variant.name}-{dtype}-{size}".replace("/", "_").replace("=", "").replace(",", "_")
    report = out_dir / f"{stem}.ncu-rep"
    job = json.dumps({"family": family.name, "variant": variant.name, "dtype": dtype, "size": size})
    command = ncu_tools.profile_command(
        ncu,
        report,
        ncu_tools.nvtx_filter(family.name, variant.name, dtype, size),
        metrics,
        [sys.executable, "-m", "rooflint.engine.profile", job],
        ("SourceCounters",) if sass else (),
    )
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not report.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"ncu failed for {stem} (exit {done.returncode}): {tail[0][:300]}")
    text = subprocess.run(ncu_tools.import_command(ncu, report), capture_output=True, text=True, check=True).stdout
    (out_dir / f"{stem}.csv").write_text(text)
    kernel = None
    if sass:
        source = subprocess.run(ncu_tools.source_import_command(ncu, report), capture_output=True, text=True)
        (out_dir / f"{stem}-sass.csv").write_text(source.stdout)
        try:
            if source.returncode != 0:
                raise ValueError(f"ncu --import exited {source.returncode}: {source.stderr.strip()[-300:]}")
            kernel = sass_tools.main_kernel(sass_tools.parse_source_csv(source.stdout))
        except ValueError as error:
            raise RuntimeError(f"ncu's source page for {stem}: {error}") from None
    return ncu_tools.parse_raw_csv(text), kernel


def available_metrics() -> list[str]:
    ncu = ncu_tools.ncu_path()
    if ncu is None:
        return []
    done = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True)
    return ncu_tools.parse_query_metrics(done.stdout)


def read_ncu_csv(path: Path | str) -> list[NcuRow]:
    """Rows of an ncu.csv written by `rooflint profile --ncu`, to re-plot or combine families."""
    return read_typed_csv(path, NcuRow, "rooflint ncu CSV")


def plot_ncu(rows: list[NcuRow], spec, out_base: Path, extra_ceilings=None) -> list[Path]:
    """Each variant twice: at its analytic AI and at its ncu-measured AI, joined by a dotted link."""
    import pandas as pd

    from rooflint.outputs.plot import plot_roofline

    points = []
    for r in rows:
        model_bytes = r.modeled_bytes if math.isfinite(r.modeled_bytes) else r.ideal_bytes
        seconds = r.time_ms / 1e3
        label = f"{r.family}/{r.variant} {r.dtype}"
        common = {"family": r.family, "variant": r.variant, "kind": r.kind, "dtype": r.dtype, "link": label}
        points.append(
            {
                **common,
                "label": f"{label} (model)",
                "point_kind": "measured",
                "ai_flop_per_byte": r.analytic_flops / model_bytes if model_bytes else math.nan,
                "achieved_tflops": r.analytic_flops / seconds / 1e12,
                "achieved_gbps": model_bytes / seconds / 1e9,
            }
        )
        points.append(
            {
                **common,
                "label": f"{label} (ncu{', analytic FLOPs' if r.flops_source == 'analytic' else ''})",
                "point_kind": "ncu",
                "ai_flop_per_byte": r.measured_ai,
                "achieved_tflops": r.measured_flops / seconds / 1e12,
                "achieved_gbps": r.measured_dram_bytes / seconds / 1e9,
            }
        )
    title = f"analytic vs Nsight Compute: {spec.name}"
    return plot_roofline(pd.DataFrame(points), spec, out_base, title, extra_ceilings)


# ---------------------------------------------------------------------------- the profile command


@dataclass
class SassRow:
    """One line of sass.csv: a variant's main kernel, one class of instructions."""

    variant: str
    kernel: str
    instructions: str  # what they do (analysis/sass.CLASSES)
    executed: float  # warp-level instructions executed
    stall_samples: float
    samples_pct: float  # of the kernel's samples
    top_reasons: str


def sass_rows(kernels: dict[str, sass_tools.KernelSass]) -> list[SassRow]:
    return [
        SassRow(
            variant,
            sass_tools.short_name(kernel.name, 120),
            share.name,
            share.executed,
            share.samples,
            share.share_pct,
            share.top_reasons,
        )
        for variant, kernel in kernels.items()
        for share in sass_tools.class_shares(kernel)
    ]


@dataclass
class ProfileOutcome:
    family: str
    dtype: str
    size: str
    device: str
    shares: list[KernelShare]
    ncu_rows: list[NcuRow] = field(default_factory=list)  # empty without ncu
    sass: dict[str, sass_tools.KernelSass] = field(default_factory=dict)  # variant -> its main kernel (--sass)
    skipped: list[str] = field(default_factory=list)  # "variant: why" for variants ncu could not profile
    written: list[Path] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C or SIGTERM: the files hold the variants profiled before it

    @property
    def failed(self) -> list[KernelShare]:
        """The variants that failed their check or raised: the profile's exit code is 1."""
        return [s for s in self.shares if s.status in FAILING_STATUSES]


def run_profile(
    family: str,
    variants: list[str] | None = None,
    dtype: str | None = None,
    size: str | None = None,
    device: str | None = None,
    ncu: bool = False,
    sass: bool = False,
    out: Path | None = None,
    spec_file: Path | str | None = None,
    gpu: str | None = None,
    on_note: Callable[[str], None] = lambda message: None,
) -> ProfileOutcome:
    """`rooflint profile`: kernels per call of each runnable variant (kernels.csv), then with ``ncu``
    each variant's counters beside its analytic model (ncu.csv, roofline_ncu.*). Everything is
    checked before anything runs; ``on_note`` hears about slow steps and skipped variants."""
    from rooflint.core.paths import output_dir, writable_file
    from rooflint.core.specs import current_gpu_spec
    from rooflint.engine import timing
    from rooflint.engine.bench import check_shapes_fit
    from rooflint.engine.device import resolve_device
    from rooflint.engine.worker import missing_requirement

    fam = get_family(family)
    # An empty value (an unset shell variable) is no dtype or size, not "the default": refused below
    # with the valid ones.
    dtype = fam.default_dtypes[0] if dtype is None else dtype
    size, out = DEFAULT_SIZE if size is None else size, Path(out or DEFAULT_OUT)
    device = resolve_device(device)
    check_flags(device, ncu, sass, spec_file, gpu)
    if dtype not in fam.dtypes:
        raise UserError(f"{fam.name} has no dtype {dtype!r}; valid: {', '.join(fam.dtypes)}")
    check_shapes_fit(fam, dtype, fam.cases(size)[:1], device)  # an unknown or oversized size: before anything runs
    check_variant_names(variants or [], [fam])
    asked = select_variants(fam, variants or [], dtype)
    if not asked:  # the names matched, the dtype left none: "can run on cpu" blamed the device
        named = ", ".join(f"{v.name} ({'/'.join(v.dtypes)})" for v in select_variants(fam, variants or []))
        raise UserError(f"no variant of {family} asked for has {dtype}: {named}; pick another --dtype")
    missing = {v.name: missing_requirement(v, device) for v in asked}
    chosen = [v for v in asked if missing[v.name] is None]
    if not chosen:  # why each cannot, and which could: the line said neither
        why = "; ".join(f"{name}: {reason}" for name, reason in missing.items())
        here = [v.name for v in select_variants(fam, (), dtype) if missing_requirement(v, device) is None]
        valid = f"; runnable here: {', '.join(here)}" if here else ""
        raise UserError(f"no variant of {family} can run on {device} among those asked for ({why}){valid}")
    spec = current_gpu_spec(spec_file, gpu) if ncu else None  # ncu's roofline: this GPU's datasheet
    output_dir(out)
    writable_file(out / "kernels.csv", "kernel list")  # before the profiling, not after it
    shares = [not_profiled(v.name, SKIPPED, missing[v.name]) for v in asked if missing[v.name]]
    times_ms, reference = {}, None
    interrupted = False
    try:
        for variant in list(chosen):
            try:
                case, fn = build(fam, variant, size, dtype, device)  # once per variant: shares and, with ncu, time
                if reference is None:  # every build has the same seeded inputs: one float64 answer for all
                    reference = fam.reference(case.inputs, case.params)
            except VariantSkipped as skipped:  # this shape or GPU is not one it takes (bench skips it too)
                failure = not_profiled(variant.name, SKIPPED, str(skipped))
            except Exception as error:  # noqa: BLE001 - a variant that cannot be built is a row, not the end
                failure = not_profiled(variant.name, ERROR, describe(error))
            else:
                failure = checked(fam, variant, dtype, fn, reference)
            if failure is not None:  # failed or broken: reported, never profiled or put under ncu
                shares.append(failure)
                chosen.remove(variant)
                continue
            try:  # a later call can raise where the checked first one passed: a row, and the others are kept
                shares += kernel_shares(fn, device, variant.name)
                if spec is not None:  # timed here, not under ncu, whose replays distort time
                    times_ms[variant.name] = timing.time_cuda(fn, l2_bytes=spec.l2_bytes).median_ms
            except Exception as error:  # noqa: BLE001
                shares = [s for s in shares if s.variant != variant.name]
                shares.append(not_profiled(variant.name, ERROR, f"raised while profiled: {describe(error)}"))
                chosen.remove(variant)
            del fn
            gc.collect()
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM while a variant was built, checked or profiled: the variants profiled
        # before it are written to kernels.csv below (they were lost with it), and ncu is not started.
        interrupted = True
    place = {v.name: i for i, v in enumerate(asked)}
    shares.sort(key=lambda s: place[s.variant])  # run order, the skipped among them (a stable sort)
    outcome = ProfileOutcome(fam.name, dtype, size, device, shares, interrupted=interrupted)
    outcome.written.append(write_typed_csv(shares, out / "kernels.csv", KernelShare))
    if spec is not None and chosen and not interrupted:
        torch.cuda.empty_cache()  # the ncu children need the memory
        _profile_counters(fam, in_asked_order(chosen, variants or []), outcome, out, spec, on_note, times_ms, sass)
    return outcome


def _profile_counters(fam, chosen, outcome: ProfileOutcome, out: Path, spec, on_note, times_ms, sass=False) -> None:
    """Each variant under ncu in a child process (which builds it there), beside its time here."""
    from rooflint.core.roofs import measured_overlay

    available = available_metrics()
    metrics = [
        *ncu_tools.BASE_METRICS,
        *ncu_tools.delivery_metrics(available),
        *ncu_tools.tensor_metrics(available),
        *limiter.why_metrics(available),
    ]
    metrics = list(dict.fromkeys(metrics))
    try:
        for variant in chosen:
            on_note(f"profiling {variant.name} under ncu ...")
            time_ms = times_ms[variant.name]
            try:
                counters, kernel = run_ncu(fam, variant, outcome.dtype, outcome.size, out, metrics, sass)
            except RuntimeError as error:
                outcome.skipped.append(f"{variant.name}: {error}")
                on_note(f"skipped {variant.name}: {error}")
                continue
            outcome.ncu_rows.append(ncu_row(fam, variant, outcome.dtype, outcome.size, counters, time_ms))
            if kernel is not None:
                outcome.sass[variant.name] = kernel
    except KeyboardInterrupt:  # minutes of ncu per variant: those counted before it are written below
        outcome.interrupted = True
    if outcome.ncu_rows:
        outcome.written.append(write_typed_csv(outcome.ncu_rows, out / "ncu.csv", NcuRow))
        outcome.written += plot_ncu(outcome.ncu_rows, spec, out / "roofline_ncu", measured_overlay(spec))
    if outcome.sass:
        outcome.written.append(write_typed_csv(sass_rows(outcome.sass), out / "sass.csv", SassRow))


if __name__ == "__main__":
    child_main()
