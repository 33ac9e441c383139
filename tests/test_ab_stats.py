"""The statistics behind `rooflint ab` (analysis/ab_stats.py): Student's t in closed form, the
paired ratio's interval, wins and the verdict."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflint.analysis.ab_stats import (
    BASELINE,
    CSV_COLUMNS,
    FASTER,
    NOISE,
    SLOWER,
    Sample,
    csv_rows,
    speedup_interval,
    student_t_cdf,
    student_t_quantile,
    summarize,
    verdict,
    wins,
)

# Two-sided 95% critical values of Student's t (any statistics table): df -> t_0.975.
T_TABLE = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 9: 2.2622, 10: 2.2281, 30: 2.0423}

times = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)


@pytest.mark.parametrize("df, expected", T_TABLE.items())
def test_quantiles_match_the_table(df, expected):
    assert student_t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)


def test_one_degree_of_freedom_is_the_cauchy_distribution():
    for t in (-3.0, -0.5, 0.0, 0.7, 10.0):
        assert student_t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)


def test_many_degrees_of_freedom_approach_the_normal():
    assert student_t_quantile(0.975, 2000) == pytest.approx(statistics.NormalDist().inv_cdf(0.975), abs=2e-3)


@settings(max_examples=60, deadline=None)
@given(p=st.floats(min_value=0.01, max_value=0.99), df=st.integers(min_value=1, max_value=60))
def test_quantile_inverts_the_cdf(p, df):
    assert student_t_cdf(student_t_quantile(p, df), df) == pytest.approx(p, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(t=st.floats(min_value=-50, max_value=50), df=st.integers(min_value=1, max_value=60))
def test_cdf_is_symmetric_and_within_zero_and_one(t, df):
    assert 0.0 <= student_t_cdf(t, df) <= 1.0
    assert student_t_cdf(t, df) + student_t_cdf(-t, df) == pytest.approx(1.0, abs=1e-12)


def test_the_interval_is_the_t_interval_of_the_log_ratios():
    first = [1.00, 1.02, 0.99, 1.01]
    entry = [0.90, 0.93, 0.88, 0.91]
    logs = [math.log(a / b) for a, b in zip(first, entry)]
    half = T_TABLE[3] * statistics.stdev(logs) / 2  # sqrt(4 rounds)
    interval = speedup_interval(first, entry)
    assert interval.estimate == pytest.approx(math.exp(statistics.fmean(logs)))
    assert (interval.low, interval.high) == pytest.approx(
        (math.exp(statistics.fmean(logs) - half), math.exp(statistics.fmean(logs) + half)), rel=1e-6
    )
    assert verdict(interval) == FASTER
    assert verdict(speedup_interval(entry, first)) == SLOWER


def test_identical_rounds_are_within_noise():
    interval = speedup_interval([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert (interval.estimate, interval.low, interval.high) == (1.0, 1.0, 1.0)
    assert verdict(interval) == NOISE


def test_rounds_that_disagree_are_within_noise():
    assert verdict(speedup_interval([1.0, 1.0, 1.0], [0.8, 1.25, 1.0])) == NOISE


def test_one_round_gives_no_interval():
    interval = speedup_interval([1.0], [0.5])
    assert (interval.low, interval.high) == (0.0, math.inf) and verdict(interval) == NOISE


def test_unpaired_rounds_are_refused():
    with pytest.raises(ValueError, match="paired"):
        speedup_interval([1.0, 2.0], [1.0])


@settings(max_examples=80, deadline=None)
@given(pairs=st.lists(st.tuples(times, times), min_size=2, max_size=12), factor=st.floats(min_value=0.25, max_value=4))
def test_interval_holds_its_estimate_inverts_and_scales(pairs, factor):
    first, entry = [a for a, _ in pairs], [b for _, b in pairs]
    interval = speedup_interval(first, entry)
    assert interval.low <= interval.estimate * (1 + 1e-9) and interval.estimate <= interval.high * (1 + 1e-9)
    swapped = speedup_interval(entry, first)
    assert swapped.estimate == pytest.approx(1 / interval.estimate, rel=1e-9)
    assert swapped.low == pytest.approx(1 / interval.high, rel=1e-9)
    # An entry slower by the same factor in every round: the ratio moves by that factor, the width does not.
    scaled = speedup_interval(first, [b * factor for b in entry])
    assert scaled.estimate == pytest.approx(interval.estimate / factor, rel=1e-9)
    assert scaled.high / scaled.low == pytest.approx(interval.high / interval.low, rel=1e-6)


@settings(max_examples=60, deadline=None)
@given(table=st.lists(st.lists(times, min_size=2, max_size=2), min_size=1, max_size=10))
def test_each_round_has_one_winner_and_the_fastest_everywhere_wins_all(table):
    by_entry = {"b": [row[0] for row in table], "c": [row[1] for row in table]}
    assert sum(wins(by_entry).values()) == len(table)
    by_entry["a"] = [min(row) / 2 for row in table]
    assert wins(by_entry)["a"] == len(table)


def test_a_tie_goes_to_the_entry_listed_first():
    assert wins({"a": [1.0, 2.0], "b": [1.0, 1.0]}) == {"a": 1, "b": 1}


def samples(shape="n=8", regime="burst", **rounds_by_entry):
    return [
        Sample(shape, regime, r, entry, ms, joules)
        for entry, rounds in rounds_by_entry.items()
        for r, (ms, joules) in enumerate(rounds)
    ]


def test_summaries_are_against_the_first_entry_of_each_shape_and_regime():
    taken = samples(old=[(2.0, 0.4), (2.0, 0.5), (2.1, math.nan)], new=[(1.0, 0.2), (1.05, 0.2), (0.95, 0.3)])
    taken += samples(regime="sustained", old=[(3.0, math.nan)] * 3, new=[(3.0, math.nan)] * 3)
    summaries = summarize(taken, order=["old", "new"])
    by = {(s.regime, s.entry): s for s in summaries}
    assert [(s.regime, s.entry) for s in summaries] == [
        ("burst", "old"), ("burst", "new"), ("sustained", "old"), ("sustained", "new")
    ]  # fmt: skip
    assert by["burst", "old"].verdict == BASELINE and by["burst", "old"].speedup.estimate == 1.0
    assert by["burst", "new"].verdict == FASTER and by["burst", "new"].wins == 3
    assert by["burst", "old"].joules_per_call == 0.45  # median of the rounds that read energy
    assert by["burst", "new"].median_ms == 1.0 and by["burst", "new"].rounds_ms == (1.0, 1.05, 0.95)
    assert by["sustained", "new"].verdict == NOISE and math.isnan(by["sustained", "new"].joules_per_call)


def test_clock_and_power_are_medians_over_the_rounds_that_read_them():
    # NVML's clock and power beside the time: a faster entry that only ran at a higher clock shows it.
    taken = [
        Sample("n=8", "burst", r, "a", 1.0, 0.5, mhz, watts)
        for r, (mhz, watts) in enumerate([(1980.0, 500.0), (1600.0, math.nan), (1700.0, 650.0)])
    ]
    taken += [Sample("n=8", "burst", r, "b", 1.0) for r in range(3)]  # a CPU: nothing read
    by = {s.entry: s for s in summarize(taken)}
    assert (by["a"].sm_clock_mhz, by["a"].power_w) == (1700.0, 575.0)
    assert math.isnan(by["b"].sm_clock_mhz) and math.isnan(by["b"].power_w)
    rows = {row["entry"]: row for row in csv_rows(by.values())}
    assert (rows["a"]["sm_clock_mhz"], rows["a"]["power_w"]) == (1700.0, 575.0)
    assert rows["b"]["sm_clock_mhz"] == "" and rows["b"]["power_w"] == ""
    assert list(rows["a"]) == list(CSV_COLUMNS)


def test_the_order_given_picks_the_first_entry():
    taken = samples(old=[(2.0, 0.0)] * 2, new=[(1.0, 0.0)] * 2)
    first = summarize(taken, order=["new", "old"])[0]
    assert (first.entry, first.verdict) == ("new", BASELINE)


def test_csv_rows_leave_unknown_numbers_empty():
    rows = csv_rows(summarize(samples(a=[(1.0, math.nan)] * 2, b=[(1.0, 0.1)] * 2)))
    assert rows[0]["joules_per_call"] == "" and rows[1]["joules_per_call"] == 0.1
    assert rows[1]["rounds_ms"] == "1 1" and rows[1]["verdict"] == NOISE


def test_an_entry_s_power_is_the_energy_counter_over_its_window_else_nvml_s_readings():
    # A few NVML readings per window lag the load; the counter's joules over the window do not.
    from rooflint.engine.ab.rounds import mean_power_w
    from rooflint.engine.nvml import Telemetry

    assert mean_power_w(Telemetry(energy_j=12.0, window_s=0.02, power_median_w=300.0)) == 600.0
    assert mean_power_w(Telemetry(energy_j=math.nan, window_s=0.02, power_median_w=300.0)) == 300.0
    assert mean_power_w(Telemetry(energy_j=12.0, window_s=0.0, power_median_w=300.0)) == 300.0
    assert math.isnan(mean_power_w(Telemetry()))  # a CPU: nothing read
