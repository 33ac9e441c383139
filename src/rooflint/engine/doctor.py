"""rooflint doctor: is this GPU fit to benchmark on, before a bench spends an hour on it?

It reads the GPU through NVML (name, driver, persistence and ECC mode, power limit, clocks idle
and under a 0.3 s bf16 matmul burst, clock-event reasons, other processes), measures the copy and
bf16 matmul ceilings against the datasheet (engine.ceilings' own measurements), and times one
large copy with rooflint's timer and with triton.testing.do_bench. It only reads: it never sets
clocks, power limits or any other setting.

Unfit, with exit code 1, when any of these holds:
- no GPU (or NVML cannot read it, so throttling could not be detected);
- the SM clock under load is under 90% of the GPU's maximum (NVML's, else the datasheet boost);
- NVML reports a thermal or hardware slowdown, idle or under load;
- another process is computing on the GPU;
- rooflint's timer and do_bench disagree by more than 5% on the same closure.
The GPU-side work goes through a Probe and NVML through a facade, so tests fake both on a CPU.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from rooflint.engine import nvml
from rooflint.engine.nvml import SLOWDOWN_REASONS, Sampler, Telemetry
from rooflint.engine.settings import Regime, ThrottlePolicy

NAN = math.nan
THRESHOLD = ThrottlePolicy().threshold  # the loaded SM clock's share of the maximum, as bench's throttle check
# ... unless the only reason NVML gives is the software power cap: back-to-back bf16 matmuls draw
# a Hopper to its power limit, and a healthy one then clocks well under its maximum. That is the
# sustained power regime, not a fault. Under 60% (where a GPU that really throttles sits) it is
# unfit whatever the reason.
POWER_CAP_FLOOR = 0.60
TIMER_TOLERANCE = 0.05  # rooflint's timer and do_bench must agree within 5% on a large copy
COPY_GIB = 1.0  # each side of the timer-check copy: 2 GiB moved, far beyond any L2


@dataclass
class DoctorReport:
    gpu_name: str = ""
    driver_version: str = ""
    nvml_error: str = ""  # why NVML could not be read; empty when it could
    cuda_device: str = ""  # torch.cuda's name for the device; empty when torch sees no GPU
    persistence_mode: bool | None = None
    ecc_enabled: bool | None = None
    power_limit_w: float = NAN
    max_sm_clock_mhz: float = NAN  # NVML
    boost_clock_mhz: float = NAN  # datasheet
    temperature_c: float = NAN
    idle_sm_clock_mhz: float = NAN
    idle_mem_clock_mhz: float = NAN
    idle_reasons: list[str] = field(default_factory=list)
    loaded_sm_clock_mhz: float = NAN  # median over a 0.3 s bf16 matmul burst
    loaded_sm_clock_min_mhz: float = NAN
    loaded_power_w: float = NAN
    loaded_temperature_c: float = NAN
    loaded_reasons: list[str] = field(default_factory=list)
    other_processes: list[str] = field(default_factory=list)
    copy_gbps: float = NAN
    copy_datasheet_gbps: float = NAN
    matmul_bf16_tflops: float = NAN
    matmul_bf16_datasheet_tflops: float = NAN
    timer_ms: float = NAN  # rooflint's engine.timing.time_cuda on a large copy
    do_bench_ms: float = NAN  # triton.testing.do_bench (median) on the same closure
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def timer_ratio(self) -> float:
        ok = math.isfinite(self.timer_ms) and math.isfinite(self.do_bench_ms) and self.do_bench_ms > 0
        return self.timer_ms / self.do_bench_ms if ok else NAN

    @property
    def max_clock_mhz(self) -> float:
        """The clock the loaded one is judged against: NVML's maximum, else the datasheet's boost."""
        return self.max_sm_clock_mhz if math.isfinite(self.max_sm_clock_mhz) else self.boost_clock_mhz

    @property
    def fit(self) -> bool:
        return not self.problems

    @property
    def verdict(self) -> str:
        if not self.fit:
            return "unfit: " + "; ".join(self.problems)
        maximum = self.max_clock_mhz
        if self.loaded_sm_clock_mhz < THRESHOLD * maximum:  # only the power cap: a note, not a fault
            return (
                f"fit to benchmark (at its power cap under matmul load: {self.loaded_sm_clock_mhz:.0f} of "
                f"{maximum:.0f} MHz; burst rows run faster than this, --regime sustained measures at it)"
            )
        return "fit to benchmark"

    @property
    def exit_code(self) -> int:
        return 0 if self.fit else 1

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.update(timer_ratio=self.timer_ratio, verdict=self.verdict, fit=self.fit)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in data.items()}


def judge(report: DoctorReport, threshold: float = THRESHOLD, timer_tolerance: float = TIMER_TOLERANCE) -> list[str]:
    """The reasons the GPU is unfit to benchmark on; empty when it is fit."""
    if not report.gpu_name and not report.cuda_device:
        return ["no GPU found" + (f" ({report.nvml_error})" if report.nvml_error else "")]
    problems = []
    if report.nvml_error:
        problems.append(f"NVML cannot read the GPU, so throttling cannot be detected ({report.nvml_error})")
    if not report.cuda_device:
        problems.append(f"torch sees no CUDA device, though NVML lists {report.gpu_name}")
    maximum = report.max_clock_mhz
    loaded = report.loaded_sm_clock_mhz
    if math.isfinite(loaded) and math.isfinite(maximum) and maximum > 0 and loaded < threshold * maximum:
        power_capped = set(report.loaded_reasons) == {"sw_power_cap"}
        if not power_capped or loaded < POWER_CAP_FLOOR * maximum:
            floor = POWER_CAP_FLOOR if power_capped else threshold
            problems.append(
                f"throttled under load: SM clock {loaded:.0f} MHz is under {floor:.0%} of its {maximum:.0f} MHz maximum"
                + (" (power cap)" if power_capped else "")
            )
    slowdowns = [r for r in dict.fromkeys(report.idle_reasons + report.loaded_reasons) if r in SLOWDOWN_REASONS]
    if slowdowns:
        problems.append("thermal or hardware slowdown active: " + ", ".join(slowdowns))
    if report.other_processes:
        problems.append("another process is using the GPU: " + ", ".join(report.other_processes))
    ratio = report.timer_ratio
    if math.isfinite(ratio) and abs(ratio - 1) > timer_tolerance:
        problems.append(
            f"rooflint's timer and triton's do_bench disagree by {abs(ratio - 1):.1%} on a large copy "
            f"({report.timer_ms:.3f} vs {report.do_bench_ms:.3f} ms)"
        )
    return problems


class Probe(Protocol):
    """The GPU-side measurements, through torch; tests pass a fake."""

    def cuda_device(self) -> str: ...  # torch's name for the GPU, or "" when there is none

    def loaded(self, sampler: Sampler) -> Telemetry: ...

    def datasheet(self) -> tuple[float, float, float, str]: ...  # bandwidth, bf16 peak, boost clock, note

    def copy_gbps(self) -> float: ...

    def matmul_bf16_tflops(self) -> float: ...

    def timer_vs_do_bench(self) -> tuple[float, float]: ...  # (rooflint ms, do_bench ms)


class TorchProbe:
    """The real measurements: engine.timing's load and timer, engine.ceilings' ceilings."""

    def __init__(self, spec_file: str | None = None, gpu: str | None = None) -> None:
        self.spec_file, self.gpu = spec_file, gpu

    def cuda_device(self) -> str:
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else ""

    def loaded(self, sampler: Sampler) -> Telemetry:
        from rooflint.engine.timing import loaded_telemetry

        return loaded_telemetry(sampler, Regime.BURST)

    def datasheet(self) -> tuple[float, float, float, str]:
        from rooflint.core.errors import UserError
        from rooflint.core.specs import current_gpu_spec

        try:
            spec = current_gpu_spec(self.spec_file, self.gpu)
        except UserError as error:
            return NAN, NAN, NAN, str(error)
        bf16 = spec.tensor_peak_tflops("bf16")
        boost = spec.get("boost_clock_mhz")
        return spec.bandwidth_gbps, NAN if bf16 is None else bf16, NAN if boost is None else boost, ""

    def copy_gbps(self) -> float:
        from rooflint.engine import ceilings

        return ceilings.dram_copy_gbps()  # the copy `rooflint ceilings` measures

    def matmul_bf16_tflops(self) -> float:
        from rooflint.engine import ceilings

        return ceilings._matmul_tflops("bf16", 8192) or NAN

    def timer_vs_do_bench(self) -> tuple[float, float]:
        import torch
        import triton.testing

        from rooflint.engine import ceilings, timing

        copy = ceilings._copier(int(COPY_GIB * 2**30) // 4, "cuda")
        l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 50 * 2**20
        ours = timing.time_cuda(copy, l2_bytes=l2_bytes).median_ms
        theirs = triton.testing.do_bench(copy, warmup=25, rep=200, return_mode="median")
        return ours, float(theirs)


def _attempt(report: DoctorReport, what: str, measure: Any, default: Any) -> Any:
    """One measurement; a failure becomes a note on the report, not a traceback."""
    try:
        return measure()
    except Exception as error:  # noqa: BLE001 - doctor reports what it could not measure, and goes on
        report.notes.append(f"{what} not measured: {type(error).__name__}: {str(error).splitlines()[0][:200]}")
        return default


_OPEN = object()  # sentinel: open the visible GPU through NVML


def diagnose(probe: Probe | None = None, device: Any = _OPEN) -> DoctorReport:
    """Gather everything, then judge it. ``device`` is an NVML facade (nvml.NvmlDevice or a fake),
    None for "no NVML"; by default the visible GPU is opened."""
    probe = probe or TorchProbe()
    report = DoctorReport()
    if device is _OPEN:
        device, report.nvml_error = nvml.open_device()
    elif device is None:
        report.nvml_error = "NVML unavailable"
    # Processes first: this one has no CUDA context yet, so every process listed is another one.
    before = device.compute_processes() if device is not None else []
    if device is not None:
        report.gpu_name, report.driver_version = device.name(), device.driver_version()
        report.persistence_mode, report.ecc_enabled = device.persistence_enabled(), device.ecc_enabled()
        report.power_limit_w, report.max_sm_clock_mhz = device.power_limit_w(), device.max_sm_clock_mhz()
        report.temperature_c = device.temperature_c()
        report.idle_sm_clock_mhz, report.idle_mem_clock_mhz = device.sm_clock_mhz(), device.mem_clock_mhz()
        report.idle_reasons = nvml.reason_names(device.event_reasons())
    report.cuda_device = _attempt(report, "CUDA device", probe.cuda_device, "")
    if report.cuda_device:
        sampler = nvml.NvmlSampler(device) if device is not None else nvml.NullSampler()
        loaded = _attempt(report, "clock under load", lambda: probe.loaded(sampler), Telemetry())
        report.loaded_sm_clock_mhz, report.loaded_sm_clock_min_mhz = loaded.sm_clock_mhz, loaded.sm_clock_min_mhz
        report.loaded_power_w, report.loaded_temperature_c = loaded.power_median_w, loaded.temperature_max_c
        report.loaded_reasons = list(loaded.reasons)
        bandwidth, bf16, boost, why = _attempt(report, "datasheet", probe.datasheet, (NAN, NAN, NAN, ""))
        report.copy_datasheet_gbps, report.matmul_bf16_datasheet_tflops, report.boost_clock_mhz = bandwidth, bf16, boost
        if why:
            report.notes.append(f"no datasheet to compare with: {why}")
        report.copy_gbps = _attempt(report, "copy ceiling", probe.copy_gbps, NAN)
        report.matmul_bf16_tflops = _attempt(report, "bf16 matmul ceiling", probe.matmul_bf16_tflops, NAN)
        report.timer_ms, report.do_bench_ms = _attempt(report, "timer check", probe.timer_vs_do_bench, (NAN, NAN))
    if device is not None:
        own = nvml.own_pids(before, device.compute_processes())
        others = {p.pid: p for p in before if p.pid not in own}
        others.update({p.pid: p for p in device.compute_processes() if p.pid not in own})
        report.other_processes = [p.describe() for p in others.values()]
    report.problems = judge(report)
    return report
