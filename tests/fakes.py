"""Test doubles shared by several test modules."""

from __future__ import annotations


class FakeNvmlDevice:
    """rooflint.engine.nvml.NvmlDevice's facade with set readings, for the doctor and the sampler.

    ``sm_clocks`` are the SM clocks successive reads return (the last one repeats), so a clock can
    drop under load; each energy read adds ``energy_step_j`` to the counter.
    """

    def __init__(self, processes=(), reasons=0x0, sm_clocks=(1980.0,), power_w=90.0, temperature_c=35.0,
                 energy_j=0.0, energy_step_j=0.0):  # fmt: skip
        self.processes = list(processes)
        self.reasons = reasons
        self.sm_clocks = list(sm_clocks)
        self.reads = 0
        self.power, self.temperature = power_w, temperature_c
        self.energy, self.energy_step = energy_j, energy_step_j

    def name(self):
        return "NVIDIA H100 80GB HBM3"

    def driver_version(self):
        return "550.54.15"

    def persistence_enabled(self):
        return True

    def ecc_enabled(self):
        return None  # not supported: shown as unknown, never a crash

    def power_limit_w(self):
        return 700.0

    def max_sm_clock_mhz(self):
        return 1980.0

    def temperature_c(self):
        return self.temperature

    def sm_clock_mhz(self):
        self.reads += 1
        return self.sm_clocks[min(self.reads, len(self.sm_clocks)) - 1]

    def mem_clock_mhz(self):
        return 2619.0

    def power_w(self):
        return self.power

    def total_energy_j(self):
        self.energy += self.energy_step
        return self.energy

    def event_reasons(self):
        return self.reasons

    def compute_processes(self):
        return self.processes


class FakeDeviceClock:
    """The device clock FakeCudaEvent reads; each timed call advances it by its scripted duration."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = iter(durations)
        self.calls = 0

    def run(self):
        self.calls += 1
        self.now += next(self.durations)


class FakeCudaEvent:
    """torch.cuda.Event on a FakeDeviceClock: record() reads it, elapsed_time() subtracts."""

    clock: FakeDeviceClock

    def __init__(self, enable_timing=True):
        self.t = float("nan")

    def record(self):
        self.t = FakeCudaEvent.clock.now

    def elapsed_time(self, end):
        return end.t - self.t


def install_fake_cuda(monkeypatch, durations) -> FakeDeviceClock:
    """CUDA events, synchronize and the spin kernel faked on a CPU; returns the clock the timed
    calls must advance (its ``run``)."""
    import torch

    monkeypatch.setattr(torch.cuda, "Event", FakeCudaEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None)
    FakeCudaEvent.clock = FakeDeviceClock(durations)
    return FakeCudaEvent.clock


def fake_nvml_window(reasons=0):
    """A Sampler with NVML present whose window holds one reading with the given clock-event reasons
    (0x4: the power cap; 0: a cool GPU)."""
    import contextlib
    import time

    from rooflint.engine.nvml import Reading, Recording, Sampler

    class FakeNvmlWindow(Sampler):
        available = True

        @contextlib.contextmanager
        def record(self):
            recording = Recording()
            recording.readings.append(Reading(time.perf_counter(), sm_mhz=1980.0, power_w=300.0, reasons=reasons))
            yield recording

    return FakeNvmlWindow()
