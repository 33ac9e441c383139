"""Cool down only after hot work: a burst row waits for the power reading to fall under a quarter of
the limit after the pre-heat or a row NVML saw at the power cap (or slowed by heat, or could not
read), and only under half of it after a row that never reached the cap. Fake NVML and clock."""

from __future__ import annotations

import pytest
from test_timing import CoolingSampler, FakeTime

from rooflint.engine import timing
from rooflint.engine.nvml import Sampler, Telemetry


def telemetry(*reasons: str) -> Telemetry:
    return Telemetry(sm_clock_mhz=1980.0, power_median_w=300.0, reasons=reasons, n_readings=12)


@pytest.mark.parametrize(
    "seen,hot",
    [
        (telemetry(), False),  # under the cap all along
        (telemetry("applications_clocks"), False),
        (telemetry("sw_power_cap"), True),  # the limiter acted
        (telemetry("hw_thermal"), True),
        (telemetry("hw_power_brake"), True),
        (Telemetry(), True),  # NVML read nothing: unknown counts as hot
        (None, True),
    ],
)
def test_a_row_ran_hot_when_nvml_saw_the_cap_or_heat_or_nothing(seen, hot):
    assert timing.ran_hot(seen) is hot


def start_after(monkeypatch, last_hot: bool, gap_s: float, shares: list[float]) -> tuple[float, list[float]]:
    """start_state for a row ``gap_s`` after the last one: (seconds waited, times it heated)."""
    fake, heats = FakeTime(), []

    def heat() -> None:
        heats.append(fake.now)
        fake.sleep(0.1)

    monkeypatch.setattr(timing._BurstState, "last_row_end", fake.now - gap_s)
    monkeypatch.setattr(timing._BurstState, "last_row_hot", last_hot)
    began = fake.now
    timing.start_state(CoolingSampler(shares), heat, fake.sleep, fake.clock)
    return fake.now - began, heats


FALLING = [0.72 - 0.05 * i for i in range(20)]  # a 1 s average shedding a row's power, 5% a poll


def test_after_a_row_under_the_cap_the_next_starts_once_the_power_is_under_half(monkeypatch):
    waited, heats = start_after(monkeypatch, last_hot=False, gap_s=0.3, shares=FALLING)
    assert heats == [] and waited == pytest.approx(5 * timing.COOL_POLL_S)  # 0.72 -> 0.47
    waited, _ = start_after(monkeypatch, last_hot=False, gap_s=0.3, shares=[0.4])
    assert waited == 0.0  # a memory-bound row's power: no wait at all


def test_after_a_hot_row_the_next_waits_as_before_for_a_quarter(monkeypatch):
    waited, heats = start_after(monkeypatch, last_hot=True, gap_s=0.3, shares=FALLING)
    assert heats == [] and waited == pytest.approx(10 * timing.COOL_POLL_S)  # 0.72 -> 0.22


def test_after_the_pre_heat_a_row_waits_for_a_quarter_whatever_the_last_row_did(monkeypatch):
    # 1.5 s after a cool row (its kernel compiled): heated, and the heat is hot work.
    waited, heats = start_after(monkeypatch, last_hot=False, gap_s=1.5, shares=FALLING)
    assert len(heats) == round(timing.PREHEAT_S / 0.1)
    assert waited == pytest.approx(timing.PREHEAT_S + 10 * timing.COOL_POLL_S)


def test_a_row_is_hot_until_its_timed_samples_say_otherwise(monkeypatch):
    monkeypatch.setattr(timing, "start_state", lambda sampler: None)
    monkeypatch.setattr(timing._BurstState, "last_row_hot", False)
    with pytest.raises(RuntimeError), timing.burst_row(Sampler()):
        raise RuntimeError("the kernel failed before its samples")
    assert timing._BurstState.last_row_hot is True  # unknown: the next row cools fully


class Recorded(Sampler):
    """A sampler whose recording ends with the given telemetry."""

    def __init__(self, seen: Telemetry) -> None:
        self.seen = seen

    def record(self):
        import contextlib

        from rooflint.engine.nvml import Recording

        @contextlib.contextmanager
        def recording():
            done = Recording()
            yield done
            done.telemetry = self.seen

        return recording()


@pytest.mark.parametrize("reasons,hot", [((), False), (("sw_power_cap",), True)])
def test_the_timed_samples_leave_their_verdict_for_the_next_row(monkeypatch, reasons, hot):
    class Event:
        def record(self) -> None:
            pass

        def elapsed_time(self, other) -> float:
            return 1.0

    monkeypatch.setattr(timing.torch.cuda, "Event", lambda enable_timing: Event())
    monkeypatch.setattr(timing.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(timing._BurstState, "last_row_hot", True)
    samples, _ = timing.timed_samples(lambda: None, 3, lambda i: None, Recorded(telemetry(*reasons)), "", 0)
    assert samples == [1.0, 1.0, 1.0] and timing._BurstState.last_row_hot is hot
