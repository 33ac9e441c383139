"""Reliability of 71da009..a6375cd: --max-noise only for rows known to be memory-bound, and a
summary line whose "(most: ...)" names what it counts."""

from __future__ import annotations

import dataclasses
import time
from types import SimpleNamespace

import pytest
from fakes import fake_nvml_window, install_fake_cuda

from rooflint.core.specs import measured_spec
from rooflint.engine import timing
from rooflint.engine.run_clock import RunTally, run_record, summary_line
from rooflint.engine.settings import MeasureSettings, Regime
from rooflint.engine.worker import Task, Worker

# ---------------------------------------------------------------------- --max-noise in the worker


def test_a_row_whose_bound_is_unknown_takes_its_full_budget(monkeypatch):
    """A spec without the peak a row's FLOPs need (a user's spec file, fp8 on an A100) leaves the
    row's bound unknown (""). It may be a GEMM at the power cap: it must take its full budget, as a
    compute-bound row does; only rows known to be memory-bound may stop early (docs/timing.md)."""
    asked = []

    def fake_time_cpu(fn, *, sampler, regime, max_noise=0.0):
        fn()
        asked.append(max_noise)
        return dataclasses.replace(timing.summarize([1.0] * 20, "cpu_wall", False), regime=regime)

    monkeypatch.setattr(timing, "time_cpu", fake_time_cpu)
    # CUDA-core peak only: attention's tensor-core FLOPs have no roof, so no compute floor.
    spec = measured_spec("cpu", "CPU (measured)", 20.0, {"cuda_fp32_tflops": 0.5}, "")
    worker = Worker("cpu", spec, MeasureSettings(Regime.BURST, max_noise=0.5))
    row = worker.run(Task("attention", "eager", "fp32", "custom", {"B": 1, "H": 1, "N": 256, "D": 64, "causal": False}))
    assert row.status == "ok" and row.bound == "", (row.status, row.bound, row.message)
    assert asked == [0.0]
    # A memory-bound row on the same spec still gets the setting.
    stream = worker.run(Task("vector_add", "eager", "fp32", "custom", {"n": 1024}))
    assert stream.status == "ok" and stream.bound == "memory"
    assert asked == [0.0, 0.5]


# ------------------------------------------------------------------------------ the summary line


def _record(*reports):
    tally = RunTally()
    tally.worker_started()
    for report, family, variant in reports:
        tally.add({"phases_s": report}, family=family, variant=variant)
    return run_record(tally, "s", "e", 200.0, reference_cache=False, rows=len(reports))


def test_the_summary_never_puts_a_variants_build_seconds_inside_the_compile_phase():
    """first_calls_by_variant_s sums compile and build. Shown inside "compile N s (most: ...)", a
    CUDA variant's nvcc build read as more compile time than the whole run's compile phase."""
    record = _record(
        ({"compile": 2.0}, "softmax", "triton"),
        ({"compile": 0.5, "build": 60.0}, "softmax", "cuda"),
    )
    line = summary_line(record)
    compile_part = next(part for part in line.split(", ") if part.startswith("compile"))
    assert compile_part.startswith("compile 2 s")
    assert "60 s" not in compile_part, line  # softmax/cuda's 60 s are its build, not compile
    assert "softmax/cuda 60 s" in line  # still named, as the longest first calls
    assert "compile and build" in line  # said to count both


def test_the_summary_names_the_longest_first_calls_where_they_are_all_build():
    """A run whose compile phase is under half a second but whose builds took a minute still names
    the variant its first calls went to."""
    record = _record(({"compile": 0.1, "build": 60.0}, "softmax", "cuda"))
    assert "softmax/cuda 60 s" in summary_line(record)


def test_the_summary_names_no_variant_whose_first_calls_round_to_nothing():
    record = _record(*[({"compile": 0.2}, "softmax", name) for name in ("triton", "compile_max", "quack")])
    assert record["phases_s"]["compile"] >= 0.5
    assert "most" not in summary_line(record)


# ------------------------------------------------------------ --max-noise: 50 ms of samples first


def test_a_gpu_row_sized_on_slow_calls_never_stops_before_50_ms_of_samples(monkeypatch):
    """The first checkpoint is sized from the flushed estimate; a row after an idle GPU estimates
    its calls many times slower than they run (docs/perf-notes/measurement.md: 22 samples where 430
    fit). Its first checkpoint then comes after a few ms of samples, with one NVML reading at most:
    it must not stop before NOISE_MIN_MS of samples have run, as the rule says."""
    clock = install_fake_cuda(monkeypatch, [0.1] * 400)  # steady 0.1 ms calls, sized as if they took 1 ms
    cool = fake_nvml_window()
    samples, _ = timing.timed_samples(clock.run, 400, lambda i: None, cool, "", 0, max_noise=0.005, first=50)
    assert len(samples) == 400  # 40 ms in all: never 50 ms of samples, so the full budget
    # Where 50 ms do come, it stops at the first checkpoint past them, not before.
    clock = install_fake_cuda(monkeypatch, [0.1] * 2000)
    samples, _ = timing.timed_samples(clock.run, 2000, lambda i: None, cool, "", 0, max_noise=0.005, first=50)
    assert len(samples) == 500


class _SlowStartClock:
    """time.perf_counter as time_cpu reads it, moved only by the timed function: the first two calls
    (the warm call and the one the estimate is taken from) last 10 ms, every later one 0.5 ms."""

    def __init__(self):
        self.now, self.calls = 0.0, 0

    def perf_counter(self):
        return self.now

    def fn(self):
        self.calls += 1
        self.now += 0.010 if self.calls <= 2 else 0.0005


def test_a_cpu_row_sized_on_slow_calls_never_stops_before_50_ms_of_samples(monkeypatch):
    clock = _SlowStartClock()
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=clock.perf_counter, sleep=time.sleep))
    measured = timing.time_cpu(clock.fn, regime=Regime.BURST, rep_ms=200.0, max_noise=0.005)
    # Sized on the 10 ms estimate: 20 samples, checkpoints at 10 and 15 (5 and 7.5 ms of 0.5 ms
    # calls). None reaches 50 ms, so every sample is taken.
    assert measured.n_samples == 20
    assert measured.median_ms == pytest.approx(0.5)
