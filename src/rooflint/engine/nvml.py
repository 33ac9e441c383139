"""What the GPU did while a row was timed: clocks, power, temperature, clock-event reasons, energy.

A kernel's time is only comparable with another's at the same SM clock. Under load a GPU lowers
its clock when it reaches its power cap or a temperature limit, and a broken fan or a neighbour's
job can hold it at a third of its boost clock for minutes; the kernel then looks slow for a reason
that is not in the kernel. NVML (the `pynvml` module of the nvidia-ml-py package) reads what the
driver knows; a background thread samples it every ~15 ms while a block of work runs.

rooflint only ever reads through NVML: it never sets clocks, power limits or any other setting.
Without NVML (a CPU box, a container without the driver's library) every reading is NaN and the
run goes on: `NullSampler` records nothing and never raises.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

NAN = math.nan
SAMPLE_INTERVAL_S = 0.015  # about 15 ms: several readings in a 200 ms timed window

# NVML's clock-event (formerly "throttle") reason bits, by the names rows record.
REASON_BITS = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal"),
    (0x040, "hw_thermal"),
    (0x080, "hw_power_brake"),
    (0x100, "display_clocks"),
)
# Reasons that mean the GPU is slowed by heat or by a hardware signal (power brake, slowdown line):
# a row measured under them is not what this GPU does when healthy. sw_power_cap is not among them:
# reaching the power cap is what a GPU does under sustained dense load, and the clock check
# catches what it costs.
SLOWDOWN_REASONS = frozenset({"hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"})


def reason_names(mask: int) -> list[str]:
    """NVML reason bits as names; gpu_idle is dropped (it only marks the instants between calls)."""
    return [name for bit, name in REASON_BITS if mask & bit and name != "gpu_idle"]


@dataclass(frozen=True)
class Reading:
    t_s: float  # time.perf_counter() when read
    sm_mhz: float = NAN
    mem_mhz: float = NAN
    power_w: float = NAN
    temperature_c: float = NAN
    reasons: int = 0  # NVML clock-event reason bits


def _finite(values: Iterable[float]) -> list[float]:
    return [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def _median(values: Iterable[float]) -> float:
    kept = _finite(values)
    return statistics.median(kept) if kept else NAN


@dataclass(frozen=True)
class Telemetry:
    """A summary of the readings taken while one block of work ran."""

    sm_clock_mhz: float = NAN  # median
    sm_clock_min_mhz: float = NAN
    mem_clock_mhz: float = NAN  # median
    power_median_w: float = NAN
    temperature_max_c: float = NAN
    energy_j: float = NAN  # NVML total-energy counter, end minus start
    window_s: float = NAN  # wall time from the start of the block to its end
    reasons: tuple[str, ...] = ()  # every reason seen in any reading, in NVML's bit order
    n_readings: int = 0

    @classmethod
    def from_readings(cls, readings: list[Reading], energy_j: float, window_s: float) -> Telemetry:
        mask = 0
        for reading in readings:
            mask |= reading.reasons
        sm = _finite(r.sm_mhz for r in readings)
        temperatures = _finite(r.temperature_c for r in readings)
        return cls(
            sm_clock_mhz=statistics.median(sm) if sm else NAN,
            sm_clock_min_mhz=min(sm) if sm else NAN,
            mem_clock_mhz=_median(r.mem_mhz for r in readings),
            power_median_w=_median(r.power_w for r in readings),
            temperature_max_c=max(temperatures) if temperatures else NAN,
            energy_j=energy_j,
            window_s=window_s,
            reasons=tuple(reason_names(mask)),
            n_readings=len(readings),
        )


def settled(readings: list[Reading], window_s: float = 1.0, tolerance: float = 0.02) -> bool:
    """True once the median power and the median SM clock of the last ``window_s`` differ from
    those of the window before by less than ``tolerance``: the GPU has reached its steady state
    (at its power cap, or below it) for this load."""
    if not readings:
        return False
    end = readings[-1].t_s
    last = [r for r in readings if r.t_s > end - window_s]
    before = [r for r in readings if end - 2 * window_s < r.t_s <= end - window_s]
    if len(last) < 3 or len(before) < 3:
        return False
    for name in ("power_w", "sm_mhz"):
        previous = _median(getattr(r, name) for r in before)
        now = _median(getattr(r, name) for r in last)
        if not (math.isfinite(previous) and math.isfinite(now) and previous > 0):
            return False
        if abs(now - previous) > tolerance * previous:
            return False
    return True


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: float = NAN  # NaN where the driver does not say

    def describe(self) -> str:
        used = f" ({self.used_bytes / 2**30:.1f} GiB)" if math.isfinite(self.used_bytes) else ""
        return f"pid {self.pid}{used}"


# --------------------------------------------------------------------------------- the facade


def _nvml() -> Any:
    import pynvml

    return pynvml


def visible_gpu() -> int | str:
    """The NVML index (or UUID) of the GPU this process computes on, read from CUDA_VISIBLE_DEVICES
    without touching CUDA: bench gives each worker one GPU that way, and the worker must look at
    the GPU's processes before it creates its own CUDA context (see ``own_pids``)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if first.isdigit():
        return int(first)
    if first.startswith(("GPU-", "MIG-")):
        return first
    return 0


class NvmlDevice:
    """Read-only access to one GPU through NVML. Each method returns NaN or None for a reading
    this GPU or driver does not support, never raises for it. Tests pass their own fake with the
    same methods."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    @classmethod
    def open(cls, which: int | str | None = None) -> NvmlDevice:
        """The visible GPU; raises pynvml.NVMLError (or ImportError) where NVML is missing."""
        pynvml = _nvml()
        pynvml.nvmlInit()
        which = visible_gpu() if which is None else which
        if isinstance(which, str):
            return cls(pynvml.nvmlDeviceGetHandleByUUID(which))
        return cls(pynvml.nvmlDeviceGetHandleByIndex(which))

    def _read(self, name: str, *args: Any, default: Any = NAN) -> Any:
        pynvml = _nvml()
        try:
            return getattr(pynvml, name)(self.handle, *args)
        except (pynvml.NVMLError, AttributeError):
            return default

    def name(self) -> str:
        value = self._read("nvmlDeviceGetName", default="")
        return value.decode() if isinstance(value, bytes) else str(value)

    def driver_version(self) -> str:
        pynvml = _nvml()
        try:
            value = pynvml.nvmlSystemGetDriverVersion()
        except pynvml.NVMLError:
            return ""
        return value.decode() if isinstance(value, bytes) else str(value)

    def sm_clock_mhz(self) -> float:
        return float(self._read("nvmlDeviceGetClockInfo", _nvml().NVML_CLOCK_SM))

    def mem_clock_mhz(self) -> float:
        return float(self._read("nvmlDeviceGetClockInfo", _nvml().NVML_CLOCK_MEM))

    def max_sm_clock_mhz(self) -> float:
        return float(self._read("nvmlDeviceGetMaxClockInfo", _nvml().NVML_CLOCK_SM))

    def power_w(self) -> float:
        return self._read("nvmlDeviceGetPowerUsage") / 1e3  # milliwatts

    def power_limit_w(self) -> float:
        return self._read("nvmlDeviceGetEnforcedPowerLimit") / 1e3

    def temperature_c(self) -> float:
        return float(self._read("nvmlDeviceGetTemperature", _nvml().NVML_TEMPERATURE_GPU))

    def total_energy_j(self) -> float:
        return self._read("nvmlDeviceGetTotalEnergyConsumption") / 1e3  # millijoules since driver load

    def event_reasons(self) -> int:
        value = self._read("nvmlDeviceGetCurrentClocksEventReasons", default=None)
        if value is None:  # drivers before the 535 rename
            value = self._read("nvmlDeviceGetCurrentClocksThrottleReasons", default=0)
        return int(value)

    def compute_processes(self) -> list[GpuProcess]:
        found = self._read("nvmlDeviceGetComputeRunningProcesses", default=[])
        return [GpuProcess(int(p.pid), float(p.usedGpuMemory) if p.usedGpuMemory is not None else NAN) for p in found]

    def ecc_enabled(self) -> bool | None:
        modes = self._read("nvmlDeviceGetEccMode", default=None)
        return None if modes is None else bool(modes[0])

    def persistence_enabled(self) -> bool | None:
        mode = self._read("nvmlDeviceGetPersistenceMode", default=None)
        return None if mode is None else bool(mode)


def open_device() -> tuple[NvmlDevice | None, str]:
    """The visible GPU's NVML facade, or None and why not (no library, no driver, no GPU)."""
    try:
        return NvmlDevice.open(), ""
    except ImportError:
        return None, "the nvidia-ml-py package is not installed"
    except Exception as error:  # noqa: BLE001 - any NVML failure means "no NVML here", never a crash
        return None, f"NVML unavailable: {error}"


# -------------------------------------------------------------------------------- the samplers


@dataclass
class Recording:
    """Filled while a ``Sampler.record()`` block runs; ``telemetry`` is set when it ends."""

    readings: list[Reading] = field(default_factory=list)
    telemetry: Telemetry = field(default_factory=Telemetry)


class Sampler:
    """The interface the worker and the timers use; this base records nothing (NaN everywhere)."""

    available = False

    @contextlib.contextmanager
    def record(self) -> Iterator[Recording]:
        recording = Recording()
        started = time.perf_counter()
        try:
            yield recording
        finally:
            recording.telemetry = Telemetry(window_s=time.perf_counter() - started)

    def compute_processes(self) -> list[GpuProcess]:
        return []

    def max_sm_clock_mhz(self) -> float:
        return NAN

    def power_share(self) -> float:
        """The power NVML reads now, as a share of the enforced limit (NaN where unknown)."""
        return NAN


class NullSampler(Sampler):
    """No NVML here (CPU runs, no driver): every reading NaN, no thread, nothing raised."""


class NvmlSampler(Sampler):
    """Samples one GPU in a background thread while a block runs, and reads its energy counter
    at both ends. NVML's calls go through ctypes, which releases the GIL, so the sampling thread
    barely delays the host thread that enqueues the timed calls."""

    available = True

    def __init__(self, device: NvmlDevice, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.device = device
        self.interval_s = interval_s

    def read(self) -> Reading:
        device = self.device
        return Reading(
            t_s=time.perf_counter(),
            sm_mhz=device.sm_clock_mhz(),
            mem_mhz=device.mem_clock_mhz(),
            power_w=device.power_w(),
            temperature_c=device.temperature_c(),
            reasons=device.event_reasons(),
        )

    def _poll(self, recording: Recording, stop: threading.Event) -> None:
        while True:
            recording.readings.append(self.read())  # list.append is atomic: the caller may peek
            if stop.wait(self.interval_s):
                return

    @contextlib.contextmanager
    def record(self) -> Iterator[Recording]:
        recording = Recording()
        energy_before = self.device.total_energy_j()
        started = time.perf_counter()
        stop = threading.Event()
        thread = threading.Thread(target=self._poll, args=(recording, stop), name="rooflint-nvml", daemon=True)
        thread.start()
        try:
            yield recording
        finally:
            stop.set()
            thread.join()
            window_s = time.perf_counter() - started
            energy_j = self.device.total_energy_j() - energy_before
            # The counter ticks every few tens of ms; a delta of 0 means "not measured", not "free".
            if not (math.isfinite(energy_j) and energy_j > 0):
                energy_j = NAN
            recording.telemetry = Telemetry.from_readings(list(recording.readings), energy_j, window_s)

    def compute_processes(self) -> list[GpuProcess]:
        return self.device.compute_processes()

    def power_share(self) -> float:
        limit = self.device.power_limit_w()
        return self.device.power_w() / limit if limit > 0 else NAN

    def max_sm_clock_mhz(self) -> float:
        return self.device.max_sm_clock_mhz()


def sampler_for(device: str) -> Sampler:
    """An NvmlSampler on the visible GPU for a CUDA run, else (CPU, or no NVML) a NullSampler."""
    if device != "cuda":
        return NullSampler()
    nvml_device, _why = open_device()
    return NvmlSampler(nvml_device) if nvml_device is not None else NullSampler()


# ------------------------------------------------------------------------- other processes


def own_pids(before: list[GpuProcess], after: list[GpuProcess]) -> set[int]:
    """The PIDs under which NVML lists this process, from two snapshots: one taken before this
    process created its CUDA context, one after. Inside a container NVML reports host PIDs, which
    differ from os.getpid(); the entry that appeared when our context was made is then ours."""
    pid = os.getpid()
    if any(p.pid == pid for p in after):
        return {pid}
    known = {p.pid for p in before}
    return {pid} | {p.pid for p in after if p.pid not in known}


def other_processes(sampler: Sampler, own: set[int] | None = None) -> list[GpuProcess]:
    """Compute processes on the GPU other than this one: their kernels share the SMs and the
    power budget with the timed ones, so times measured beside them are not this GPU's."""
    own = own if own is not None else {os.getpid()}
    return [p for p in sampler.compute_processes() if p.pid not in own]
