"""The timers' CPU-testable parts: the clean flush, the heat-up, the regime dispatch and its options."""

from __future__ import annotations

import contextlib
import itertools
import json
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rooflint.core.errors import UserError
from rooflint.engine import timer, timing
from rooflint.engine.nvml import Reading, Recording, Sampler
from rooflint.engine.request import BenchRequest
from rooflint.engine.settings import MeasureSettings, Regime, ThrottlePolicy


def test_clean_flush_writes_then_reads_the_whole_buffer(monkeypatch):
    monkeypatch.setattr(timing, "MIN_FLUSH_BYTES", 4096)
    clean = timing.L2Flush(l2_bytes=1024, clean=True, device="cpu")
    assert clean.nbytes == 4096 and clean.buffer.numel() == 1024
    clean(3)
    assert bool((clean.buffer == 3).all())
    assert int(clean.sink) == 3 * 1024  # the read-back pass touched every element
    write_only = timing.L2Flush(l2_bytes=1024, clean=False, device="cpu")
    write_only.sink.fill_(-1)
    write_only(5)
    assert bool((write_only.buffer == 5).all()) and int(write_only.sink) == -1  # no read: the old flush


def test_flush_buffer_is_at_least_twice_the_l2(monkeypatch):
    monkeypatch.setattr(timing, "MIN_FLUSH_BYTES", 1024)
    assert timing.L2Flush(l2_bytes=8192, device="cpu").nbytes == 2 * 8192


def test_summary_counts_the_calls_and_their_busy_time():
    summary = timing.summarize([1.0, 2.0, 3.0], "cuda_events", True)
    assert (summary.calls, summary.busy_ms, summary.median_ms, summary.regime) == (3, 6.0, 2.0, "burst")


class SettlingSampler(Sampler):
    """Power climbs for ``ramp`` readings and then holds; one reading per chunk of work, 0.25 s apart."""

    available = True

    def __init__(self, ramp: int):
        self.ramp = ramp
        self.recording: Recording | None = None

    @contextlib.contextmanager
    def record(self):
        self.recording = Recording()
        yield self.recording

    def add_reading(self, t: float) -> None:
        index = len(self.recording.readings)
        power = 300 + 50 * min(index, self.ramp)
        self.recording.readings.append(Reading(t, sm_mhz=1500, power_w=power))


def _fake_clock(step: float = 0.25):
    ticks = itertools.count()
    return lambda: next(ticks) * step


def test_heat_up_runs_until_power_and_clock_settle():
    sampler, clock = SettlingSampler(ramp=12), _fake_clock()
    chunks = []

    def chunk():
        chunks.append(1)
        sampler.add_reading(len(chunks) * 0.25)

    timing.heat_up(chunk, sampler, min_s=2.0, max_s=10.0, clock=clock)
    # Power stops rising at reading 12 (3 s); settled needs 2 s of flat readings after it.
    assert 18 <= len(chunks) <= 22


def test_heat_up_stops_at_the_cap_when_the_gpu_never_settles():
    sampler, clock = SettlingSampler(ramp=10_000), _fake_clock()
    chunks = []

    def chunk():
        chunks.append(1)
        sampler.add_reading(len(chunks) * 0.25)

    timing.heat_up(chunk, sampler, min_s=2.0, max_s=4.0, clock=clock)
    assert len(chunks) == 16  # 4 s at 0.25 s per chunk


def test_heat_up_without_nvml_runs_the_minimum():
    chunks = []
    timing.heat_up(lambda: chunks.append(1), Sampler(), min_s=1.0, max_s=10.0, clock=_fake_clock())
    assert len(chunks) == 4


class CoolingSampler(Sampler):
    """NVML's power reading, as a share of the limit, after a compute-bound row: ``shares`` one per
    poll (the last repeats), against a fake clock that sleep advances."""

    available = True

    def __init__(self, shares: list[float]):
        self.shares = shares
        self.reads = 0

    def power_share(self) -> float:
        self.reads += 1
        return self.shares[min(self.reads - 1, len(self.shares) - 1)]


class FakeTime:
    def __init__(self):
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def clock(self) -> float:
        return self.now


def test_a_burst_row_waits_until_the_gpu_has_shed_the_last_rows_power():
    # A 1 s average falling from 86% of the limit by 5% a poll: under 25% after 13 polls.
    fake = FakeTime()
    sampler = CoolingSampler([0.86 - 0.05 * i for i in range(20)])
    waited = timing.cool_down(sampler, sleep=fake.sleep, clock=fake.clock)
    assert sampler.reads == 14 and waited == pytest.approx(13 * timing.COOL_POLL_S)


def test_a_cool_gpu_starts_at_once_and_no_nvml_never_waits():
    fake = FakeTime()
    assert timing.cool_down(CoolingSampler([0.12]), sleep=fake.sleep, clock=fake.clock) == 0.0
    assert timing.cool_down(Sampler(), sleep=fake.sleep, clock=fake.clock) == 0.0
    assert timing.cool_down(CoolingSampler([math.nan]), sleep=fake.sleep, clock=fake.clock) == 0.0


def test_cooling_stops_once_the_power_no_longer_falls():
    # Another process holds the GPU at 60% of its limit (or its idle draw is that high): the wait ends
    # 0.3 s after the reading stopped falling, not at the cap. NVML updating its reading only every
    # other poll does not end it sooner.
    fake = FakeTime()
    sampler = CoolingSampler([0.9, 0.9, 0.8, 0.8, 0.7, 0.7, 0.6])
    waited = timing.cool_down(sampler, sleep=fake.sleep, clock=fake.clock)
    assert 0.55 <= waited <= 0.7, waited


def test_cooling_gives_up_at_its_cap():
    fake = FakeTime()
    sampler = CoolingSampler([1.0 - 0.03 * i for i in range(1000)])  # falling, too slowly to finish
    waited = timing.cool_down(sampler, max_s=0.5, sleep=fake.sleep, clock=fake.clock)
    assert 0.5 <= waited < 0.5 + 1.5 * timing.COOL_POLL_S


def test_measure_times_on_the_cpu_and_records_the_regime():
    calls = []
    measured = timer.measure(lambda: calls.append(1), device="cpu", regime="burst")
    assert measured.mode == "cpu_wall" and measured.regime == "burst" and not measured.l2_flushed
    assert measured.calls == measured.n_samples and math.isnan(measured.telemetry.sm_clock_mhz)
    with pytest.raises(UserError, match="unknown regime 'hot'"):
        timer.measure(lambda: None, device="cpu", regime="hot")


def test_cpu_sustained_heats_up_before_timing(monkeypatch):
    monkeypatch.setattr(timing, "HEAT_MIN_S", 0.05)
    calls = []
    measured = timing.time_cpu(lambda: calls.append(torch.ones(8).sum()), regime="sustained", rep_ms=1)
    assert measured.regime == "sustained" and len(calls) > measured.n_samples + 10


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("regime", "hot", "unknown regime 'hot'; valid: burst, sustained"),
        ("throttle_threshold", 1.5, "must be in \\(0, 1\\]"),
        ("throttle_retries", -1, "must be 0 or more"),
        ("recovery_delay_s", -2.0, "must be 0 or more seconds"),
    ],
)
def test_measure_settings_reject_bad_timing_options(field, value, message):
    with pytest.raises(UserError, match=message):
        MeasureSettings.from_options(**{field: value})
    assert BenchRequest().measure.regime is Regime.BURST


def test_measure_settings_take_the_default_for_each_option_not_given():
    settings = MeasureSettings.from_options(regime="sustained", throttle_threshold=None, throttle_retries=5)
    assert settings == MeasureSettings(Regime.SUSTAINED, throttle=ThrottlePolicy(retries=5))
    assert MeasureSettings.from_options() == MeasureSettings()


@given(
    regime=st.sampled_from(list(Regime)),
    cuda_graphs=st.booleans(),
    threshold=st.floats(min_value=0.01, max_value=1.0),
    retries=st.integers(min_value=0, max_value=10),
    delay=st.floats(min_value=0.0, max_value=60.0),
)
def test_measure_settings_survive_the_trip_to_a_measuring_process(regime, cuda_graphs, threshold, retries, delay):
    settings = MeasureSettings(regime, cuda_graphs, ThrottlePolicy(threshold, retries, delay))
    sent = json.loads(json.dumps(settings.to_dict()))  # as the job line carries it
    assert sent["regime"] == regime.value and MeasureSettings.from_dict(sent) == settings


def test_every_cuda_timer_samples_flush_spin_start_call_end_in_that_order(monkeypatch):
    # timed_samples is the one loop behind the burst, sustained and graph-replay timers. With the
    # CUDA calls faked, the order of work on the stream is checked per sample: the flush first, the
    # spin (burst only) before the start event, the call between the two events.
    import contextlib

    from rooflint.engine import timing

    log = []

    class FakeEvent:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            self.t = len(log)
            log.append("event")

        def elapsed_time(self, other):
            return float(other.t - self.t)

    class FakeSampler:
        @contextlib.contextmanager
        def record(self):
            log.append("window-open")
            recording = type("R", (), {"telemetry": "telemetry"})()
            yield recording
            log.append("window-close")

    monkeypatch.setattr(timing.torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(timing.torch.cuda, "synchronize", lambda: log.append("sync"))
    monkeypatch.setattr(timing.torch.cuda, "_sleep", lambda cycles: log.append(f"spin {cycles}"), raising=False)
    samples, telemetry = timing.timed_samples(
        lambda: log.append("call"), 2, lambda i: log.append(f"flush {i}"), FakeSampler(), "", spin_cycles=7
    )
    assert log == ["sync", "window-open",
                   "flush 0", "spin 7", "event", "call", "event",
                   "flush 1", "spin 7", "event", "call", "event",
                   "sync", "window-close"]  # fmt: skip
    assert samples == [2.0, 2.0] and telemetry == "telemetry"  # start to end spans the call
    log.clear()
    timing.timed_samples(lambda: log.append("call"), 1, lambda i: log.append("flush"), FakeSampler(), "", 0)
    assert "spin" not in " ".join(log)  # sustained and stream timing: no spin


def test_the_first_burst_row_is_heated_first_so_it_starts_as_its_neighbours_do(monkeypatch):
    fake = FakeTime()
    heats = []

    def heat():
        heats.append(fake.now)
        fake.sleep(0.1)  # one chunk of matmuls

    monkeypatch.setattr(timing._BurstState, "last_row_end", None)
    timing.start_state(CoolingSampler([0.9 - 0.1 * i for i in range(10)]), heat, fake.sleep, fake.clock)
    assert len(heats) == round(timing.PREHEAT_S / 0.1)  # heated for PREHEAT_S...
    assert fake.now > timing.PREHEAT_S  # ...then cooled until the power fell under COOL_SHARE

    # A row right after another: no heat, only the cool-down.
    heats.clear()
    monkeypatch.setattr(timing._BurstState, "last_row_end", fake.now - 0.5)
    timing.start_state(CoolingSampler([0.2]), heat, fake.sleep, fake.clock)
    assert heats == []
    # A row 1.5 s after the last one (its kernel compiled in between): heated again. Round 19's 3 s
    # let such rows start from an idle GPU, 100-200 MHz below their neighbours' clock.
    monkeypatch.setattr(timing._BurstState, "last_row_end", fake.now - 1.5)
    timing.start_state(CoolingSampler([0.2]), heat, fake.sleep, fake.clock)
    assert len(heats) == round(timing.PREHEAT_S / 0.1)


def test_no_nvml_no_heat_no_wait():
    heats = []
    timing.start_state(Sampler(), lambda: heats.append(1))
    assert heats == []


def test_a_burst_row_records_its_end_even_when_its_timing_fails(monkeypatch):
    started = []
    monkeypatch.setattr(timing, "start_state", lambda sampler: started.append(sampler))
    monkeypatch.setattr(timing._BurstState, "last_row_end", None)
    sampler = Sampler()
    with pytest.raises(RuntimeError), timing.burst_row(sampler):
        raise RuntimeError("a kernel failed mid-row")
    assert started == [sampler] and timing._BurstState.last_row_end is not None


@pytest.mark.parametrize("regime,rows", [("burst", 1), ("sustained", 0)])
def test_graph_replays_start_from_the_burst_start_state_as_event_timed_rows_do(monkeypatch, regime, rows):
    from rooflint.engine import graph_timing

    entered = []

    @contextlib.contextmanager
    def burst_row(sampler):
        entered.append(sampler)
        yield

    monkeypatch.setattr(timing, "burst_row", burst_row)
    monkeypatch.setattr(timing, "heat_up", lambda chunk, sampler: None)
    monkeypatch.setattr(timing, "l2_flush", lambda l2_bytes: lambda i=0: None)
    monkeypatch.setattr(timing, "timed_samples", lambda *args: ([2.0, 2.0], timing.Telemetry()))
    monkeypatch.setattr(graph_timing, "_estimate_ms", lambda run, calls: 1.0)
    measured = graph_timing._time_batches(lambda: None, 4, 0, "", 10.0, "cuda_graph", Sampler(), regime)
    assert len(entered) == rows and measured.median_ms == 0.5 and measured.regime == regime
