"""--max-noise: a burst row's samples stop once its median is pinned down, never in a window that
reached the power cap, and never without NVML on a GPU. The interval's statistics, the sample loop
(on fake CUDA events), the CPU timer, the settings and the console script."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import random
import statistics
import time
from types import SimpleNamespace

import pytest
from console_script import assert_refused, needs_console_script, run_in
from fakes import fake_nvml_window, install_fake_cuda
from hypothesis import given
from hypothesis import strategies as st

from rooflint.core.errors import UserError
from rooflint.core.specs import measured_spec
from rooflint.engine import early_stop, timing
from rooflint.engine.nvml import Sampler
from rooflint.engine.settings import MeasureSettings, Regime
from rooflint.engine.worker import Task, Worker

samples_st = st.lists(st.floats(min_value=1e-3, max_value=1e3, allow_nan=False), min_size=1, max_size=400)


# ------------------------------------------------------------------------------ the statistics


@given(samples_st)
def test_the_interval_holds_the_median_and_is_made_of_samples(samples):
    ordered = sorted(samples)
    low, high = early_stop.median_interval(ordered)
    assert low in ordered and high in ordered
    assert low <= statistics.median(ordered) <= high


def test_the_interval_covers_the_true_median_at_least_95_percent_of_the_time():
    # Exponential samples (skewed, like kernel times) whose true median is ln 2; 1,000 seeded trials
    # at each size. A too narrow interval (wrong ranks, a z of 1) covers it far less often.
    rng = random.Random(0)
    for n in (10, 25, 60, 200):
        covered = 0
        for _ in range(1000):
            low, high = early_stop.median_interval(sorted(rng.expovariate(1.0) for _ in range(n)))
            covered += low <= math.log(2) <= high
        assert covered >= 940, (n, covered)


def test_the_interval_narrows_as_samples_accumulate():
    rng = random.Random(1)
    draws = [rng.gauss(10.0, 0.5) for _ in range(2000)]
    widths = [
        (lambda lo_hi: lo_hi[1] - lo_hi[0])(early_stop.median_interval(sorted(draws[:n]))) for n in (20, 200, 2000)
    ]
    assert widths[0] > widths[1] > widths[2]


@given(samples_st, st.floats(min_value=1e-4, max_value=0.5), st.floats(min_value=1e-4, max_value=0.5))
def test_pinned_at_a_tolerance_is_pinned_at_any_looser_one(samples, a, b):
    tight, loose = min(a, b), max(a, b)
    if early_stop.median_pinned(samples, tight):
        assert early_stop.median_pinned(samples, loose)


def test_pinned_needs_min_samples_a_positive_tolerance_and_a_narrow_interval():
    steady = [1.0] * early_stop.MIN_PINNED_SAMPLES
    assert early_stop.median_pinned(steady, 0.005)
    assert not early_stop.median_pinned(steady[:-1], 0.005)  # too few samples to say
    assert not early_stop.median_pinned(steady, 0.0)  # 0: every sample, always
    spread = [1.0, 1.2] * 50  # the interval spans both values: 9% either side
    assert not early_stop.median_pinned(spread, 0.05)
    assert early_stop.median_pinned(spread, 0.1)


@given(st.integers(min_value=1, max_value=5000), st.integers(min_value=-5, max_value=6000))
def test_checkpoints_rise_to_n(n, first):
    points = early_stop.checkpoints(n, first)
    assert points[-1] == n
    assert points == sorted(set(points))
    assert points[0] == max(1, min(first, n))


# ------------------------------------------------------------------- the CUDA sample loop, faked


@pytest.fixture
def fake_cuda(monkeypatch):
    return lambda durations: install_fake_cuda(monkeypatch, durations)


def test_a_steady_row_stops_at_the_first_checkpoint(fake_cuda):
    clock = fake_cuda([1.0] * 400)
    samples, _ = timing.timed_samples(
        clock.run, 400, lambda i: None, fake_nvml_window(), "", 0, max_noise=0.005, first=50
    )
    assert len(samples) == 50 == clock.calls
    assert samples == [1.0] * 50


def test_without_max_noise_every_sample_is_taken(fake_cuda):
    clock = fake_cuda([1.0] * 400)
    samples, _ = timing.timed_samples(clock.run, 400, lambda i: None, fake_nvml_window(), "", 0, first=50)
    assert len(samples) == 400 == clock.calls


def test_a_row_at_the_power_cap_takes_its_whole_budget(fake_cuda):
    clock = fake_cuda([1.0] * 400)
    samples, _ = timing.timed_samples(
        clock.run, 400, lambda i: None, fake_nvml_window(reasons=0x4), "", 0, max_noise=0.005, first=50
    )
    assert len(samples) == 400


def test_without_nvml_a_gpu_row_takes_its_whole_budget(fake_cuda):
    clock = fake_cuda([1.0] * 400)
    samples, _ = timing.timed_samples(clock.run, 400, lambda i: None, Sampler(), "", 0, max_noise=0.005, first=50)
    assert len(samples) == 400


def test_a_noisy_row_samples_until_its_median_is_pinned(fake_cuda):
    # Two modes 2% apart with 1% jitter: the median is pinned to 0.4% only after 125 samples
    # (this seed), so the loop must pass the first checkpoints and stop at the first one that is.
    rng = random.Random(2)
    durations = [rng.choice((1.0, 1.02)) * rng.uniform(0.99, 1.01) for _ in range(400)]
    clock = fake_cuda(durations)
    samples, _ = timing.timed_samples(
        clock.run, 400, lambda i: None, fake_nvml_window(), "", 0, max_noise=0.004, first=50
    )
    assert samples == pytest.approx(durations[: len(samples)])  # the first samples, each event pair's own
    assert 50 < len(samples) < 400
    assert early_stop.median_pinned(samples, 0.004)
    earlier = [point for point in early_stop.checkpoints(400, 50) if point < len(samples)]
    assert earlier and not any(early_stop.median_pinned(durations[:point], 0.004) for point in earlier)


# ----------------------------------------------------------------------------- the CPU timer


class CallClock:
    """time.perf_counter as time_cpu reads it, moved only by the timed function: each call lasts
    exactly ``call_s``, so the estimate, the sample count and every sample are known in advance."""

    def __init__(self, call_s):
        self.now, self.call_s = 0.0, call_s

    def perf_counter(self):
        return self.now

    def fn(self):
        self.now += self.call_s


def _time_cpu(monkeypatch, regime, max_noise=0.0):
    clock = CallClock(0.0005)
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=clock.perf_counter, sleep=time.sleep))
    monkeypatch.setattr(timing, "heat_up", lambda chunk, sampler, max_s: chunk())  # no 2 s heat-up in a test
    return timing.time_cpu(clock.fn, regime=regime, rep_ms=200.0, max_noise=max_noise)


def test_cpu_burst_rows_stop_early_and_sustained_ones_never(monkeypatch):
    full = _time_cpu(monkeypatch, Regime.BURST)
    assert full.n_samples == 400  # 200 ms of 0.5 ms calls
    early = _time_cpu(monkeypatch, Regime.BURST, max_noise=0.005)
    assert early.n_samples == 100  # the first checkpoint: 50 ms of samples, all alike
    assert early.median_ms == pytest.approx(0.5)
    assert _time_cpu(monkeypatch, Regime.SUSTAINED, max_noise=0.005).n_samples == 400


# ------------------------------------------------------------------------------- the worker


def test_the_worker_lets_only_memory_bound_rows_stop_early(monkeypatch):
    """A compute-bound row (its floor set by FLOPs) takes the full budget whatever --max-noise says:
    its clock settles over the whole window. A memory-bound one gets the setting."""
    asked = {}

    def fake_time_cpu(fn, *, sampler, regime, max_noise=0.0):
        fn()
        asked[max_noise] = asked.get(max_noise, 0) + 1
        return dataclasses.replace(timing.summarize([1.0] * 20, "cpu_wall", False), regime=regime)

    monkeypatch.setattr(timing, "time_cpu", fake_time_cpu)
    # A spec whose ridge (25 FLOP a byte) puts attention at N=256, D=64 (64 FLOP a byte) over it.
    spec = measured_spec("cpu", "CPU (measured)", 20.0, {"cuda_fp32_tflops": 0.5, "tensor_fp32_tflops": 0.5}, "")
    worker = Worker("cpu", spec, MeasureSettings(Regime.BURST, max_noise=0.5))
    dense = worker.run(
        Task("attention", "eager", "fp32", "custom", {"B": 1, "H": 1, "N": 256, "D": 64, "causal": False})
    )
    assert dense.status == "ok" and dense.bound == "compute" and asked == {0.0: 1}
    stream = worker.run(Task("vector_add", "eager", "fp32", "custom", {"n": 1024}))
    assert stream.status == "ok" and stream.bound == "memory" and asked == {0.0: 1, 0.5: 1}


# ------------------------------------------------------------------------------- the settings


def test_settings_carry_max_noise_to_the_measuring_process():
    settings = MeasureSettings(max_noise=0.005)
    assert MeasureSettings.from_dict(settings.to_dict()) == settings
    assert MeasureSettings().max_noise == 0.0
    assert MeasureSettings.from_options(max_noise=None).max_noise == 0.0


@pytest.mark.parametrize("value", [-0.1, 1.0, 1.5, math.nan, math.inf])
def test_settings_refuse_a_max_noise_outside_0_1(value):
    with pytest.raises(UserError, match="--max-noise"):
        MeasureSettings(max_noise=value)


# --------------------------------------------------------------------------- the console script


@needs_console_script
@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "inf", "abc"])
def test_bench_refuses_a_bad_max_noise(tmp_path, value):
    done = run_in(tmp_path, "bench", "vector_add", "--device", "cpu", "--size", "small", f"--max-noise={value}")
    assert_refused(done, "--max-noise")
    assert not (tmp_path / "rooflint-out").exists()


@needs_console_script
def test_bench_with_max_noise_takes_fewer_samples(tmp_path):
    folder = tmp_path
    common = ("bench", "vector_add", "--device", "cpu", "--size", "small", "-V", "eager", "--no-plots")
    full = run_in(folder, *common, "--out", "full")
    early = run_in(folder, *common, "--max-noise", "0.9", "--out", "early")
    assert full.returncode == 0 and early.returncode == 0, full.stderr + early.stderr

    def samples(name):
        rows = [row for row in csv.DictReader(open(folder / name / "results.csv")) if row["status"] == "ok"]
        assert rows
        return [int(row["n_samples"]) for row in rows]

    assert all(e < f for e, f in zip(samples("early"), samples("full"), strict=True))
    # The run record says how the rows were measured, so a reader can tell the two runs apart.
    measured = {
        name: json.loads((folder / name / "results.json").read_text())["run"]["measure"] for name in ("full", "early")
    }
    assert measured["full"]["max_noise"] == 0.0 and measured["early"]["max_noise"] == 0.9
    assert MeasureSettings.from_dict(measured["early"]) == MeasureSettings(max_noise=0.9)


NOTE_ARGV = ["bench", "vector_add", "--device", "cpu", "--size", "small", "-V", "eager", "--no-plots"]


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
    """The bench with --max-noise alone, which says nothing: the same run for both cases below."""
    from typer.testing import CliRunner

    from rooflint.cli.app import app

    out = tmp_path_factory.mktemp("max_noise") / "quiet"
    return CliRunner().invoke(app, [*NOTE_ARGV, "--max-noise", "0.5", "--out", str(out)])


@pytest.mark.xdist_group("max_noise_notes")  # both cases on one worker: the quiet run is made once
@pytest.mark.parametrize(
    "extra, says",
    [
        (["--regime", "sustained"], "sustained rows take their full budget"),
        (["--cuda-graphs"], "CUDA-graph replays take their full budget"),
    ],
)
def test_bench_says_where_max_noise_does_nothing(tmp_path, quiet, extra, says):
    from typer.testing import CliRunner

    from rooflint.cli.app import app

    result = CliRunner().invoke(app, [*NOTE_ARGV, "--max-noise", "0.5", *extra, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "note: --max-noise stops only burst rows timed by events; " + says in result.stderr
    assert quiet.exit_code == 0 and "--max-noise" not in quiet.stderr
