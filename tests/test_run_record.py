"""Where a bench's wall time goes: phases counted in the measuring process, summed in the parent,
kept in results.json and said in one line at the end."""

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflint.engine.run_clock import PHASES, HeldReports, PhaseClock, RunTally, run_record, summary_line

FIXTURES = str(Path(__file__).parent / "fixtures")
RECORD_FIELDS = {
    "first_calls_by_variant_s",
    "start",
    "end",
    "wall_s",
    "workers",
    "phase_basis",
    "rows",
    "phases_s",
    "other_s",
    "caches",
    "cache_state",
    "phases_by_family_s",
}


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_phase_clock_counts_seconds_and_events_and_starts_again_after_take():
    clock = FakeClock()
    phases = PhaseClock(clock)
    with phases.phase("compile"):
        clock.now += 2.5
    with pytest.raises(RuntimeError), phases.phase("measure"):  # a phase that raises still counts
        clock.now += 1.0
        raise RuntimeError
    phases.count("reference_hits", 2)
    report = phases.take()
    assert report["phases_s"]["compile"] == 2.5 and report["phases_s"]["measure"] == 1.0
    assert report["counts"] == {"reference_hits": 2}
    assert sum(phases.take()["phases_s"].values()) == 0.0
    with pytest.raises(ValueError, match="unknown phase 'nap'"):
        phases.add("nap", 1.0)


def test_the_record_sums_every_worker_and_its_phases_fit_in_the_wall_time():
    tally = RunTally()
    for _ in range(2):  # two workers, each reporting twice (its start, then a row)
        tally.worker_started()
        tally.add({"phases_s": {"startup": 1.0}, "counts": {}, "cache_entries": {"triton": 5, "build": 0}})
        tally.add({"phases_s": {"measure": 2.0, "compile": 3.0, "reference": 0.5}, "counts": {"reference_hits": 1}})
    tally.add({"counts": {"reference_misses": 1, "triton_added": 4}})
    record = run_record(
        tally, "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:10+00:00", 10.0, reference_cache=True, rows=4
    )
    assert set(record) == RECORD_FIELDS
    assert set(record["phases_s"]) == set(PHASES)
    assert all(seconds >= 0 for seconds in record["phases_s"].values()) and record["other_s"] >= 0
    assert record["phases_s"]["measure"] == 4.0 and record["workers"] == 2
    assert record["phase_basis"] == "gpu_seconds"
    assert sum(record["phases_s"].values()) + record["other_s"] == pytest.approx(10.0 * 2)
    caches = record["caches"]
    assert caches["reference"] == {"enabled": True, "hits": 2, "misses": 1, "recomputed": 0, "state": "mixed"}
    assert caches["triton"] == {"entries_before": 5, "added": 4, "state": "mixed"}
    assert caches["build"]["state"] == "unused" and record["cache_state"] == "mixed"
    json.dumps(record)  # plain JSON


def test_a_warm_run_says_so_and_the_summary_names_each_phase():
    tally = RunTally()
    tally.worker_started()
    tally.add({"phases_s": {"measure": 41.0, "compile": 150.0, "reference": 12.0, "cool": 30.0, "build": 20.0}})
    tally.add({"counts": {"reference_hits": 180}, "cache_entries": {"build": 12, "triton": 300, "inductor": 40}})
    record = run_record(tally, "a", "b", 312.0, reference_cache=True, rows=197)
    assert record["cache_state"] == "warm" and record["phase_basis"] == "wall"
    line = summary_line(record)
    assert line.startswith("wall 312 s: measure 41 s, compile 150 s, build 20 s, reference 12 s (cache: 180 hits")
    assert "cool 30 s" in line and line.endswith("other 59 s; caches warm")
    off = run_record(RunTally(), "a", "b", 1.0, reference_cache=False, rows=0)
    assert "(cache off)" in summary_line(off) and off["caches"]["reference"]["state"] == "off"


def test_autotune_picks_are_a_cache_of_the_record():
    """Picks read from rooflint's store are hits, picks timed and stored are misses (kernels/common/
    autotune_picks.py counts them in core/autotune_tally, the worker reports them)."""
    tally = RunTally()
    tally.worker_started()
    tally.add({"counts": {"autotune_hits": 7}, "cache_entries": {"build": 1, "triton": 3, "inductor": 2}})
    record = run_record(tally, "a", "b", 10.0, reference_cache=True, rows=7)
    assert record["caches"]["autotune"] == {"hits": 7, "misses": 0, "state": "warm"}
    tally.add({"counts": {"autotune_misses": 2}})
    assert run_record(tally, "a", "b", 10.0, reference_cache=True, rows=7)["caches"]["autotune"]["state"] == "mixed"
    assert (
        run_record(RunTally(), "a", "b", 1.0, reference_cache=True, rows=0)["caches"]["autotune"]["state"] == "unused"
    )


def test_the_progress_bar_shows_an_eta():
    from rich.progress import TimeRemainingColumn

    from rooflint.cli.commands.bench import progress_columns

    assert any(isinstance(column, TimeRemainingColumn) for column in progress_columns())


def test_bench_prints_the_summary_and_passes_the_cache_choice(monkeypatch, tmp_path):
    from rooflint.cli.app import app
    from rooflint.engine import bench

    seen = []

    def execute(plan, on_row):
        seen.append(plan.request.reference_cache)
        tally = RunTally()
        tally.add({"phases_s": {"measure": 1.0}})
        run = run_record(tally, "a", "b", 3.0, reference_cache=plan.request.reference_cache, rows=0)
        return bench.BenchOutcome([], [], tmp_path / "results.csv", run=run)

    monkeypatch.setattr(bench, "execute", execute)
    args = ["bench", "vector_add", "--device", "cpu", "-V", "eager", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, "--no-reference-cache"])
    assert result.exit_code == 0, result.output
    assert "wall 3 s: measure 1 s" in result.output and "(cache off)" in result.output
    assert CliRunner().invoke(app, args).exit_code == 0
    assert seen == [False, True]


def test_the_worker_process_phases_reach_the_parent(monkeypatch, tmp_path):
    """The one subprocess test: a real measuring process sends its phases and cache counts with its
    rows, and the parent's tally holds them."""
    from rooflint.core.specs import get_spec
    from rooflint.engine.bench import BenchPlan, BenchRequest, plan, run
    from rooflint.outputs.results import ResultWriter

    monkeypatch.setenv("ROOFLINT_FAMILY_MODULES", "toy_family")
    monkeypatch.setenv("PYTHONPATH", FIXTURES + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("ROOFLINT_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(FIXTURES)
    request = BenchRequest(families=["toy"], variants=["eager", "wrong"], dtypes=["fp32"], device="cpu", size="small")
    writer, tally = ResultWriter(tmp_path), RunTally()
    run(BenchPlan(request, plan(request)), writer, get_spec("h100_sxm"), lambda row: None, tally)
    writer.close()
    assert [row.status for row in writer.rows] == ["ok", "failed"]
    assert tally.workers == 1
    for phase in ("startup", "inputs", "reference", "compile", "check", "measure"):
        assert tally.phases_s[phase] > 0, phase
    assert tally.phases_s["cool"] == 0.0  # no NVML on a CPU: no cool-down
    # The rows' phases are also kept under their family: all of measure, none of startup.
    assert set(tally.by_family) == {"toy"}
    assert tally.by_family["toy"]["measure"] == pytest.approx(tally.phases_s["measure"])
    # ...and each variant's first calls under its name: the compile phase is theirs alone.
    assert set(tally.first_calls) == {"toy/eager", "toy/wrong"}
    assert sum(tally.first_calls.values()) == pytest.approx(tally.phases_s["compile"] + tally.phases_s["build"])
    assert tally.by_family["toy"]["startup"] == 0.0
    # One shape, so one reference: computed, and stored or found too cheap to store.
    assert tally.counts.get("reference_misses", 0) + tally.counts.get("reference_recomputed", 0) == 1
    assert set(tally.first_seen) == {"build", "triton", "inductor"}


def test_the_record_splits_the_phases_of_rows_by_family():
    tally = RunTally()
    tally.worker_started()
    tally.add({"phases_s": {"startup": 2.0}})  # a process's start: no row, no family
    tally.add({"phases_s": {"compile": 3.0, "measure": 1.0}}, family="softmax")
    tally.add({"phases_s": {"cool": 0.5, "measure": 1.0}}, family="softmax")
    tally.add({"phases_s": {"compile": 7.0, "cool": 2.0}}, family="attention")
    record = run_record(tally, "s", "e", 20.0, reference_cache=False, rows=3)
    assert record["phases_by_family_s"] == {
        "attention": {"compile": 7.0, "cool": 2.0},
        "softmax": {"compile": 3.0, "measure": 2.0, "cool": 0.5},
    }
    # The run-wide sums still hold every report, the family-less start too.
    assert record["phases_s"]["compile"] == 10.0 and record["phases_s"]["startup"] == 2.0


def test_the_record_sums_each_variants_first_calls_longest_first_and_the_summary_names_the_longest():
    tally = RunTally()
    tally.worker_started()
    tally.add({"phases_s": {"startup": 2.0, "compile": 1.0}})  # no row: in the run's compile, no variant's
    tally.add({"phases_s": {"compile": 3.0, "build": 4.0, "measure": 1.0}}, family="attention", variant="cuda")
    tally.add({"phases_s": {"compile": 9.0, "cool": 2.0}}, family="attention", variant="compile_builtin")
    tally.add({"phases_s": {"compile": 2.5}}, family="attention", variant="cuda")  # its second shape
    tally.add({"phases_s": {"compile": 0.25}}, family="softmax", variant="triton")
    tally.add({"phases_s": {"measure": 1.0}}, family="softmax", variant="eager")  # no first-call seconds
    record = run_record(tally, "s", "e", 40.0, reference_cache=False, rows=5)
    by_variant = record["first_calls_by_variant_s"]
    assert list(by_variant.items()) == [
        ("attention/cuda", 9.5),
        ("attention/compile_builtin", 9.0),
        ("softmax/triton", 0.25),
    ]
    assert "compile 16 s, build 4 s (most of compile and build: attention/cuda 10 s)" in summary_line(record)
    # A run with no first-call seconds to speak of names none.
    quiet = RunTally()
    quiet.add({"phases_s": {"compile": 0.1, "measure": 3.0}}, family="softmax", variant="triton")
    assert "most:" not in summary_line(run_record(quiet, "s", "e", 5.0, reference_cache=False, rows=1))


def test_a_fleet_tallies_the_reports_its_rows_carry_once_each_and_counts_workers_by_name():
    """The Dask worker's side holds each report until a row takes it; the client adds a row's reports
    once, however many tasks a worker ran, and says the phases are GPU-seconds over the workers."""
    held = HeldReports()
    held.worker_started()  # each task's run_worker says so; the client counts the Dask worker instead
    held.add({"phases_s": {"startup": 4.0}, "counts": {}, "cache_entries": {"triton": 3}})
    held.add({"phases_s": {"compile": 30.0, "measure": 50.0}, "counts": {"reference_misses": 1}}, family="softmax")
    first = held.take()
    held.add_phase("measure", 60.0)  # no family: as run_worker adds a process's start
    held.add({"phases_s": {"measure": 40.0, "cool": 5.0}, "counts": {"reference_hits": 1}}, family="softmax")
    held.add({"phases_s": {"compile": 6.0}}, family="softmax", variant="triton")
    second = held.take()
    assert held.take() == [] and held.workers == 0 and held.phases_s["measure"] == 0.0  # it sums nothing
    json.dumps([first, second])  # it travels as a Dask event

    tally = RunTally()
    for name in ("gpu0", "gpu1", "gpu0"):  # gpu0 ran two tasks
        tally.worker_started(name)
    tally.add_held(first)
    tally.add_held(second)
    tally.add_held(None)  # a row of a task from before this accounting, or a fake measure's
    tally.add_held([["not a report", "x"], [{"phases_s": {"measure": 1.0}}]])  # malformed: left out
    tally.add_held([[{"phases_s": {"compile": 1.0}}, "softmax", 7]])  # a variant that is no name: none
    tally.add_phase("plots", 2.0)
    assert tally.workers == 2
    assert tally.phases_s["measure"] == 150.0 and tally.phases_s["startup"] == 4.0
    assert tally.counts == {"reference_misses": 1, "reference_hits": 1}
    assert tally.first_seen == {"triton": 3}
    assert tally.by_family == {"softmax": {**dict.fromkeys(PHASES, 0.0), "compile": 37.0, "measure": 90.0, "cool": 5.0}}
    assert tally.first_calls == {"softmax/triton": 6.0}  # the one report that named its variant

    # 198 GPU-seconds of phases: more than the wall (80 s), even more than the two workers' 160 s
    # (a worker joined late, say): other is then zero, never negative.
    record = run_record(tally, "s", "e", 80.0, reference_cache=True, rows=2)
    assert record["workers"] == 2 and record["phase_basis"] == "gpu_seconds"
    assert sum(record["phases_s"].values()) == 198.0 and record["other_s"] == 0.0
    assert record["phases_by_family_s"] == {"softmax": {"compile": 37.0, "measure": 90.0, "cool": 5.0}}
    assert record["caches"]["reference"]["hits"] == 1 and record["caches"]["reference"]["misses"] == 1
    line = summary_line(record)
    assert line.startswith(
        "wall 80 s, phases in GPU-seconds over 2 workers: measure 150 s, compile 37 s, build 0 s "
        "(most of compile and build: softmax/triton 6 s)"
    )
    assert line.endswith("other 0 s; caches mixed")
    # With time to spare, other is the workers' seconds outside any phase.
    assert run_record(tally, "s", "e", 100.0, reference_cache=True, rows=2)["other_s"] == 2.0  # 200 - 198
