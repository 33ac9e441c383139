"""Throttle detection, retry and row marking, driven on a CPU by fake samplers and fake timers."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time

import pytest
from fakes import FakeNvmlDevice

from rooflint.core.specs import measured_spec
from rooflint.engine import nvml, throttle
from rooflint.engine.nvml import GpuProcess, NullSampler, NvmlSampler, Reading, Recording, Sampler, Telemetry
from rooflint.engine.settings import MeasureSettings, Regime, ThrottlePolicy
from rooflint.engine.throttle import Reference
from rooflint.engine.timing import summarize
from rooflint.engine.worker import Task, Worker

CPU = measured_spec("cpu", "CPU (measured)", 20.0, {"cuda_fp32_tflops": 0.5}, "measured at start")
HEALTHY = Telemetry(sm_clock_mhz=1980, sm_clock_min_mhz=1950, mem_clock_mhz=2619, power_median_w=450, reasons=())
SLOW = Telemetry(sm_clock_mhz=800, sm_clock_min_mhz=390, mem_clock_mhz=2619, power_median_w=300, reasons=())
HOT = Telemetry(sm_clock_mhz=1950, sm_clock_min_mhz=1900, reasons=("hw_thermal",))


def timed(telemetry: Telemetry, median_ms: float = 1.0, energy_j: float = math.nan, window_s: float = 1.0):
    timing = summarize([median_ms] * 10, "cuda_events", True)
    telemetry = dataclasses.replace(telemetry, energy_j=energy_j, window_s=window_s)
    return dataclasses.replace(timing, telemetry=telemetry)


# ------------------------------------------------------------------------------- pure pieces


def test_reason_bits_become_names_and_idle_is_dropped():
    assert nvml.reason_names(0x1 | 0x4 | 0x40) == ["sw_power_cap", "hw_thermal"]
    assert nvml.reason_names(0) == []


def test_telemetry_summarizes_readings():
    readings = [
        Reading(0.0, sm_mhz=1980, mem_mhz=2619, power_w=300, temperature_c=50, reasons=0x1),
        Reading(0.1, sm_mhz=1500, mem_mhz=2619, power_w=700, temperature_c=60, reasons=0x4),
        Reading(0.2, sm_mhz=1600, mem_mhz=math.nan, power_w=690, temperature_c=61, reasons=0x4 | 0x8),
    ]
    summary = Telemetry.from_readings(readings, energy_j=12.0, window_s=0.25)
    assert summary.sm_clock_mhz == 1600 and summary.sm_clock_min_mhz == 1500
    assert summary.mem_clock_mhz == 2619 and summary.power_median_w == 690 and summary.temperature_max_c == 61
    assert summary.reasons == ("sw_power_cap", "hw_slowdown") and summary.n_readings == 3
    assert math.isnan(Telemetry.from_readings([], math.nan, 0.1).sm_clock_mhz)


def test_settled_needs_two_quiet_windows():
    def series(power, clock, seconds=2.5, step=0.05):
        return [Reading(i * step, sm_mhz=clock(i * step), power_w=power(i * step)) for i in range(int(seconds / step))]

    assert nvml.settled(series(lambda t: 700, lambda t: 1400))
    assert not nvml.settled(series(lambda t: 300 + 200 * t, lambda t: 1400))  # power still rising
    assert not nvml.settled(series(lambda t: 700, lambda t: 1980 - 200 * t))  # clock still falling
    assert not nvml.settled(series(lambda t: 700, lambda t: 1400, seconds=0.5))  # not two windows yet
    assert not nvml.settled(series(lambda t: math.nan, lambda t: 1400))  # no power reading: never settled


def test_a_row_is_throttled_by_a_low_clock_or_a_slowdown_reason_not_by_the_power_cap():
    reference = Reference(1980.0)
    assert throttle.throttle_reasons(HEALTHY, reference, 0.9) == []
    assert "800 MHz < 90% of 1980 MHz" in throttle.throttle_reasons(SLOW, reference, 0.9)[0]
    assert "hw_thermal" in throttle.throttle_reasons(HOT, reference, 0.9)[0]
    capped = dataclasses.replace(HEALTHY, sm_clock_mhz=1800, reasons=("sw_power_cap",))
    assert throttle.throttle_reasons(capped, reference, 0.9) == []
    assert throttle.throttle_reasons(Telemetry(), reference, 0.9) == []  # no NVML: never throttled
    assert throttle.throttle_reasons(SLOW, Reference(math.nan), 0.9) == []


def test_reference_clock_falls_back_to_the_maximum_only_in_burst():
    assert throttle.reference_clock(1970, 1980, "burst", 0.9).clock_mhz == 1970
    slow_start = throttle.reference_clock(1300, 1980, "burst", 0.9)
    assert slow_start.clock_mhz == 1980 and "already slow" in slow_start.origin
    assert throttle.reference_clock(1300, 1980, "sustained", 0.9).clock_mhz == 1300  # the power cap is the point
    assert throttle.reference_clock(1500, math.nan, "burst", 0.9).clock_mhz == 1500


def test_retry_until_the_clock_recovers():
    attempts = iter([SLOW, SLOW, HEALTHY, SLOW])
    sleeps: list[float] = []
    judged = throttle.time_until_unthrottled(
        lambda: timed(next(attempts)), Reference(1980.0), ThrottlePolicy(0.9, 3, 2.5), sleeps.append
    )
    assert (judged.throttled, judged.retries, sleeps) == (False, 2, [2.5, 2.5])
    assert judged.timing.telemetry.sm_clock_mhz == 1980 and judged.message == ""


def test_still_throttled_after_the_retries_is_kept_and_marked():
    calls, sleeps = [], []
    judged = throttle.time_until_unthrottled(
        lambda: calls.append(1) or timed(SLOW), Reference(1980.0), ThrottlePolicy(0.9, 3, 1.0), sleeps.append
    )
    assert (judged.throttled, judged.retries, len(calls), sleeps) == (True, 3, 4, [1.0, 1.0, 1.0])
    assert judged.message.startswith("throttled after 3 re-timings: median SM clock 800 MHz")
    none = throttle.time_until_unthrottled(
        lambda: timed(HOT), Reference(1980.0), ThrottlePolicy(retries=0), sleeps.append
    )
    assert none.throttled and none.retries == 0 and len(sleeps) == 3


CAPPED = Telemetry(sm_clock_mhz=1300, sm_clock_min_mhz=1200, power_median_w=700, reasons=("sw_power_cap",))


def test_a_row_held_at_the_cap_by_its_own_load_stops_after_one_retiming():
    calls, sleeps = [], []
    # the re-timing regains 10 MHz of 1980 (0.5%): its own draw holds it at the cap
    attempts = iter([CAPPED, dataclasses.replace(CAPPED, sm_clock_mhz=1310), HEALTHY])
    judged = throttle.time_until_unthrottled(
        lambda: calls.append(1) or timed(next(attempts)), Reference(1980.0), ThrottlePolicy(0.9, 3, 2.0), sleeps.append
    )
    assert (judged.throttled, judged.retries, len(calls), sleeps) == (True, 1, 2, [2.0])
    assert judged.timing.telemetry.sm_clock_mhz == 1310
    assert judged.message.startswith("throttled after 1 re-timing: median SM clock 1310 MHz")
    assert judged.message.endswith(throttle.OWN_LOAD)


def test_a_retiming_that_regains_clock_keeps_retrying():
    # 1300 -> 1340 -> 1380 MHz: each re-timing gains 2% of the reference, so the wait is helping
    climbing = [dataclasses.replace(CAPPED, sm_clock_mhz=mhz) for mhz in (1300, 1340, 1380, 1420)]
    judged = throttle.time_until_unthrottled(
        lambda: timed(climbing.pop(0)), Reference(1980.0), ThrottlePolicy(0.9, 3, 0.0), lambda _: None
    )
    assert (judged.throttled, judged.retries, climbing) == (True, 3, [])
    assert throttle.OWN_LOAD not in judged.message


def test_thermal_or_unread_clocks_keep_every_retry():
    reference = Reference(1980.0)
    thermal = dataclasses.replace(CAPPED, reasons=("sw_power_cap", "hw_thermal"))
    assert not throttle.held_by_own_load(thermal, thermal, reference)  # heat eases with time
    assert not throttle.held_by_own_load(SLOW, SLOW, reference)  # slow without the cap: not its own draw
    unread = dataclasses.replace(CAPPED, sm_clock_mhz=math.nan)
    assert not throttle.held_by_own_load(CAPPED, unread, reference)
    assert not throttle.held_by_own_load(CAPPED, CAPPED, Reference(math.nan))
    assert throttle.held_by_own_load(CAPPED, CAPPED, reference)
    calls = []
    judged = throttle.time_until_unthrottled(
        lambda: calls.append(1) or timed(thermal), reference, ThrottlePolicy(0.9, 3, 0.0), lambda _: None
    )
    assert (judged.retries, len(calls)) == (3, 4)


def test_energy_is_the_window_energy_shared_out_by_time_in_calls():
    timing = timed(HEALTHY, median_ms=50.0, energy_j=10.0, window_s=1.0)  # 10 calls, 500 ms of 1 s
    assert throttle.energy_per_call_j(timing) == pytest.approx(10.0 * 0.5 / 10)
    assert math.isnan(throttle.energy_per_call_j(timed(HEALTHY)))  # the counter did not tick
    row = _row()
    throttle.fill_row(row, throttle.Judged(timing))
    assert row.energy_per_call_j == pytest.approx(0.5)
    assert row.flop_per_j == pytest.approx(1e9 / 0.5) and row.bytes_per_j == pytest.approx(3e9 / 0.5)
    assert row.sm_clock_mhz == 1980 and row.sm_clock_min_mhz == 1950 and row.power_median_w == 450
    assert row.regime == "burst" and not row.throttled


def _row():
    from rooflint.outputs.results import ResultRow

    return ResultRow("f", "v", "eager", "bf16", "small", "n=1", "ok", cuda_flops=1e9, ideal_bytes=3e9)


# --------------------------------------------------------------------- samplers and processes


def loaded_device(processes=()):
    """A GPU at its power cap under load: the SM clock drops after the first reading."""
    return FakeNvmlDevice(processes, reasons=0x4 | 0x20, sm_clocks=(1980.0, 1200.0), power_w=650.0,
                          temperature_c=70.0, energy_j=1000.0, energy_step_j=7.5)  # fmt: skip


def test_nvml_sampler_reads_in_the_background_while_a_block_runs():
    sampler = NvmlSampler(loaded_device(), interval_s=0.005)
    with sampler.record() as recording:
        # The block runs until the background thread has taken 5 readings (at most 10 s): no fixed
        # sleep that a loaded CI runner could outlast before the thread is scheduled.
        deadline = time.perf_counter() + 10
        while len(recording.readings) < 5 and time.perf_counter() < deadline:
            time.sleep(0.005)
    telemetry = recording.telemetry
    assert telemetry.n_readings >= 5 and telemetry.sm_clock_min_mhz == 1200
    assert telemetry.sm_clock_mhz == 1200  # most readings came after the drop
    assert telemetry.energy_j == pytest.approx(7.5) and 0 < telemetry.window_s < 10.5
    assert telemetry.reasons == ("sw_power_cap", "sw_thermal")


def test_without_nvml_nothing_is_read_and_nothing_raises():
    assert isinstance(nvml.sampler_for("cpu"), NullSampler)
    sampler = nvml.sampler_for("cuda")  # no driver on a CPU box: a NullSampler, not an error
    if not sampler.available:
        with sampler.record() as recording:
            pass
        assert math.isnan(recording.telemetry.sm_clock_mhz) and recording.telemetry.window_s >= 0
        assert sampler.compute_processes() == [] and math.isnan(sampler.max_sm_clock_mhz())


def test_own_process_is_told_apart_even_under_a_pid_namespace():
    me = os.getpid()
    assert nvml.own_pids([], [GpuProcess(me)]) == {me}
    # In a container NVML lists host PIDs: the entry that appeared with our context is ours.
    assert nvml.own_pids([GpuProcess(9)], [GpuProcess(9), GpuProcess(777)]) == {me, 777}
    sampler = NvmlSampler(loaded_device([GpuProcess(9, 2**31), GpuProcess(777)]))
    others = nvml.other_processes(sampler, {me, 777})
    assert [p.describe() for p in others] == ["pid 9 (2.0 GiB)"]


# ----------------------------------------------------------------- the worker, end to end


class ScriptedSampler(Sampler):
    """Hands out one scripted Telemetry per timed block, and reports the given processes."""

    available = True

    def __init__(self, script, processes=()):
        self.script = list(script)
        self.processes = list(processes)

    @contextlib.contextmanager
    def record(self):
        recording = Recording()
        yield recording
        recording.telemetry = self.script.pop(0)

    def compute_processes(self):
        return self.processes


def fake_timer(fn, *, nvtx_name, sampler):
    """Calls fn a few times inside the sampler's block, and says each call took 2 ms."""
    with sampler.record() as recording:
        for _ in range(3):
            fn()
    timing = summarize([2.0] * 10, "cpu_wall", False)
    return dataclasses.replace(timing, telemetry=recording.telemetry)


TASK = Task("vector_add", "eager", "fp32", "custom", {"n": 4096})


def _worker(script, processes=(), retries=3, sleeps=None):
    return Worker(
        "cpu",
        CPU,
        sampler=ScriptedSampler(script, processes),
        timer=fake_timer,
        sleep=(sleeps if sleeps is not None else []).append,
        reference_clock_mhz=1980.0,
        settings=MeasureSettings(throttle=ThrottlePolicy(0.9, retries, 2.0)),
    )


def test_worker_retimes_a_throttled_row_and_keeps_the_recovered_timing():
    sleeps: list[float] = []
    energy = dataclasses.replace(HEALTHY, energy_j=4.0, window_s=0.04)  # 10 calls x 2 ms = half the window
    row = _worker([SLOW, energy], sleeps=sleeps).run(TASK)
    assert row.status == "ok" and not row.throttled and row.throttle_retries == 1 and sleeps == [2.0]
    assert row.sm_clock_mhz == 1980 and row.median_ms == 2.0 and row.regime == "burst"
    assert row.energy_per_call_j == pytest.approx(4.0 * 0.5 / 10)
    assert row.bytes_per_j == pytest.approx(row.ideal_bytes / row.energy_per_call_j)


def test_worker_marks_a_row_still_throttled_after_the_retries():
    sleeps: list[float] = []
    row = _worker([SLOW, SLOW, HOT], retries=2, sleeps=sleeps).run(TASK)
    assert row.status == "ok" and row.throttled and row.throttle_retries == 2 and sleeps == [2.0, 2.0]
    assert row.clock_event_reasons == "hw_thermal" and row.sm_clock_mhz == 1950
    assert row.message.startswith("throttled after 2 re-timings: slowdown reported by NVML: hw_thermal")


def test_worker_notes_another_process_on_the_gpu():
    row = _worker([HEALTHY], processes=[GpuProcess(4242, 2**30)]).run(TASK)
    assert not row.throttled and "another process was using the GPU: pid 4242 (1.0 GiB)" in row.message


def test_a_cpu_worker_without_fakes_records_nan_clocks_and_its_regime():
    row = Worker("cpu", CPU, MeasureSettings(Regime.BURST)).run(
        Task("vector_add", "eager", "fp32", "custom", {"n": 1024})
    )
    assert row.status == "ok" and row.regime == "burst" and row.timing_mode == "cpu_wall"
    assert math.isnan(row.sm_clock_mhz) and math.isnan(row.energy_per_call_j) and not row.throttled


def test_compute_bound_work_held_at_the_cap_by_its_own_load_is_kept_power_capped_not_throttled():
    """A dense GEMM long enough to reach the power cap runs there on a healthy GPU, in every run: its
    re-timing regains nothing, so it is kept unthrottled with the power-capped note (lint: info; compare:
    compared). A memory-bound row cannot hold the GPU at its cap by itself: it stays throttled."""
    sleeps: list[float] = []
    # attention's QK^T and PV on tensor cores: at N=256, D=64 its 64 FLOP a byte are over this spec's ridge (25)
    dense = Task("attention", "eager", "fp32", "custom", {"B": 1, "H": 1, "N": 256, "D": 64, "causal": False})
    worker = _worker([CAPPED, dataclasses.replace(CAPPED, sm_clock_mhz=1305)], sleeps=sleeps)
    worker.spec = measured_spec("cpu", "CPU (measured)", 20.0, {"cuda_fp32_tflops": 0.5, "tensor_fp32_tflops": 0.5}, "")
    row = worker.run(dense)
    assert row.status == "ok" and row.bound == "compute" and sleeps == [2.0]
    assert not row.throttled and row.throttle_retries == 1 and row.sm_clock_mhz == 1305
    assert throttle.POWER_CAPPED_NOTE + ": compute-bound work this long runs at the cap" in row.message
    assert "SM clock 1305 MHz again after 1 re-timing" in row.message
    copy = _worker([CAPPED, CAPPED]).run(TASK)  # vector_add: memory-bound
    assert copy.bound == "memory" and copy.throttled and copy.throttle_retries == 1
    assert throttle.OWN_LOAD in copy.message and throttle.POWER_CAPPED_NOTE not in copy.message
    judged = throttle.time_until_unthrottled(
        lambda: timed(CAPPED), Reference(1980.0), ThrottlePolicy(0.9, 3, 0.0), lambda _: None, compute_bound=True
    )
    assert judged.power_capped and not judged.throttled and judged.retries == 1
