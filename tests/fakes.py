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
