"""The statistics of `rooflint ab`: per-entry medians, the ratio to the first entry with its
confidence interval, wins per round, joules per call and the verdict. Pure Python, no device.

Every entry is timed once per round, in the same round as the first entry, so the rounds pair up:
a clock that drifts or a power cap that bites during round 3 slows every entry of round 3. The
ratio is therefore taken per round (the first entry's time / this entry's, so above 1 is faster)
and summarised in log space: the estimate is the geometric mean of the per-round ratios, and the
interval is Student's t-interval on their logs (n rounds, n - 1 degrees of freedom), mapped back.
A t-interval rather than a bootstrap because an A/B has few rounds (3 to 10): a bootstrap over 5
rounds sees at most 126 distinct resamples and its percentile interval comes out too narrow.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
FASTER, SLOWER, NOISE, BASELINE = "faster", "slower", "within noise", "baseline"


@dataclass(frozen=True)
class Sample:
    """One timing of one entry: its median over the timer's samples, in one round of one regime."""

    shape: str
    regime: str
    round: int
    entry: str
    ms: float
    joules_per_call: float = math.nan  # NaN where NVML reads no energy (a CPU, no driver)
    # NVML's median SM clock and the board's mean power (the energy counter over the window) while
    # the entry was timed: an entry that is faster only because it ran at a higher clock (or slower
    # because it drew the board to its power cap) shows it.
    sm_clock_mhz: float = math.nan
    power_w: float = math.nan


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float

    @property
    def excludes_one(self) -> bool:
        return self.low > 1.0 or self.high < 1.0


@dataclass(frozen=True)
class EntrySummary:
    shape: str
    regime: str
    entry: str
    rounds_ms: tuple[float, ...]  # this entry's time in each round, in round order
    median_ms: float
    speedup: Interval  # the first entry's time / this entry's: above 1 is faster
    wins: int  # rounds in which this entry was the fastest of all
    joules_per_call: float  # median over the rounds that read energy; NaN when none did
    verdict: str
    sm_clock_mhz: float = math.nan  # medians over the rounds, as joules_per_call
    power_w: float = math.nan

    @property
    def rounds(self) -> int:
        return len(self.rounds_ms)


def student_t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with an integer number of degrees of freedom, in closed form
    (Abramowitz and Stegun 26.7.3 and 26.7.4: a finite series in cos^2 of atan(t / sqrt(df)))."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be 1 or more, not {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= cos2 * (2 * k - 1) / (2 * k)
            total += term
        central = sin * total  # P(|T| <= |t|)
    else:
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= cos2 * (2 * k) / (2 * k + 1)
            total += term
        central = 2 / math.pi * (theta + sin * math.cos(theta) * total)
    return min(1.0, max(0.0, 0.5 + math.copysign(central / 2, t)))  # rounding can step past either end


def student_t_quantile(p: float, df: int) -> float:
    """The t with P(T <= t) = p, by bisection on the closed-form CDF (monotone, so 200 halvings of
    a bracket that holds it leave it exact to double precision)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), not {p}")
    if p < 0.5:
        return -student_t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < p:
        low, high = high, high * 2
    for _ in range(200):
        middle = (low + high) / 2
        if student_t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def speedup_interval(first_ms: Sequence[float], entry_ms: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The first entry's time over this entry's, round by round (the two sequences are paired by
    round): the geometric mean and its t-interval. One round gives no interval: (0, inf)."""
    if len(first_ms) != len(entry_ms) or not first_ms:
        raise ValueError(f"paired rounds needed: {len(first_ms)} and {len(entry_ms)} timings")
    logs = [math.log(a / b) for a, b in zip(first_ms, entry_ms)]
    centre = statistics.fmean(logs)
    if len(logs) < 2:
        return Interval(math.exp(centre), 0.0, math.inf)
    half = student_t_quantile((1 + confidence) / 2, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return Interval(math.exp(centre), math.exp(centre - half), math.exp(centre + half))


def verdict(speedup: Interval) -> str:
    """faster or slower when the interval excludes 1, else within noise."""
    if speedup.low > 1.0:
        return FASTER
    if speedup.high < 1.0:
        return SLOWER
    return NOISE


def wins(by_entry: Mapping[str, Sequence[float]]) -> dict[str, int]:
    """Rounds in which each entry was the fastest (the times are paired by round); a tie goes to
    the entry listed first."""
    counts = dict.fromkeys(by_entry, 0)
    for times in zip(*by_entry.values()):
        counts[list(by_entry)[times.index(min(times))]] += 1
    return counts


def _median_finite(values: Iterable[float]) -> float:
    kept = [v for v in values if math.isfinite(v)]
    return statistics.median(kept) if kept else math.nan


def summarize(
    samples: Sequence[Sample], confidence: float = CONFIDENCE, order: Sequence[str] = ()
) -> list[EntrySummary]:
    """One summary per (shape, regime, entry): shapes and regimes in the order the samples first
    name them, entries in ``order`` (else that of the samples). Each ratio is against the first
    entry of its shape and regime."""
    rank = {entry: i for i, entry in enumerate(order)}
    groups: dict[tuple[str, str], dict[str, list[Sample]]] = {}
    for sample in sorted(samples, key=lambda s: rank.get(s.entry, len(rank))):  # stable: ties keep sample order
        groups.setdefault((sample.shape, sample.regime), {}).setdefault(sample.entry, []).append(sample)
    summaries = []
    for (shape, regime), by_entry in groups.items():
        times = {entry: [s.ms for s in sorted(taken, key=lambda s: s.round)] for entry, taken in by_entry.items()}
        won = wins(times)
        first = next(iter(times))
        for entry, taken in by_entry.items():
            speedup = speedup_interval(times[first], times[entry], confidence)
            summaries.append(
                EntrySummary(
                    shape=shape,
                    regime=regime,
                    entry=entry,
                    rounds_ms=tuple(times[entry]),
                    median_ms=statistics.median(times[entry]),
                    speedup=Interval(1.0, 1.0, 1.0) if entry == first else speedup,
                    wins=won[entry],
                    joules_per_call=_median_finite(s.joules_per_call for s in taken),
                    verdict=BASELINE if entry == first else verdict(speedup),
                    sm_clock_mhz=_median_finite(s.sm_clock_mhz for s in taken),
                    power_w=_median_finite(s.power_w for s in taken),
                )
            )
    return summaries


CSV_COLUMNS = (
    "shape",
    "regime",
    "entry",
    "rounds",
    "median_ms",
    "speedup_vs_first",
    "speedup_low",
    "speedup_high",
    "confidence",
    "wins",
    "joules_per_call",
    "sm_clock_mhz",
    "power_w",
    "verdict",
    "rounds_ms",
)


def csv_rows(summaries: Iterable[EntrySummary], confidence: float = CONFIDENCE) -> list[dict[str, object]]:
    """The table as CSV rows (CSV_COLUMNS): numbers unformatted, NaN as an empty cell."""

    def cell(value: float) -> object:
        return value if math.isfinite(value) else ""

    return [
        {
            "shape": s.shape,
            "regime": s.regime,
            "entry": s.entry,
            "rounds": s.rounds,
            "median_ms": s.median_ms,
            "speedup_vs_first": s.speedup.estimate,
            "speedup_low": cell(s.speedup.low),
            "speedup_high": cell(s.speedup.high),
            "confidence": confidence,
            "wins": s.wins,
            "joules_per_call": cell(s.joules_per_call),
            "sm_clock_mhz": cell(s.sm_clock_mhz),
            "power_w": cell(s.power_w),
            "verdict": s.verdict,
            "rounds_ms": " ".join(f"{ms:.6g}" for ms in s.rounds_ms),
        }
        for s in summaries
    ]
