"""How a fleet cuts, orders and hands out its tasks: groups, the duration table, retries on a peer,
Ctrl-C, the rows' order, speedups and places. Fast: the Dask workers live in this process and a fake
``measure`` stands in for the measuring process (tests/test_fleet.py runs the real one)."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="the fleet tests need the rooflint[dask] extra")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rooflint.engine import bench  # noqa: E402
from rooflint.engine.fleet import client as fleet_client  # noqa: E402
from rooflint.engine.fleet.cluster import LocalWorker, local_cluster  # noqa: E402
from rooflint.engine.fleet.durations import DurationTable, default_seconds, estimator  # noqa: E402
from rooflint.engine.fleet.groups import case_key, plan_groups  # noqa: E402
from rooflint.engine.worker import base_row  # noqa: E402
from rooflint.outputs.results import OK, json_safe  # noqa: E402

FIXTURES = str(Path(__file__).parent / "fixtures")
GPU = "fake_gpu"


@pytest.fixture(autouse=True)
def families(monkeypatch, tmp_path):
    """toy's six variants and fleet_toy's three; the user cache (the duration table) in tmp_path."""
    monkeypatch.setenv("ROOFLINT_FAMILY_MODULES", "toy_family,fleet_family")
    monkeypatch.setenv("ROOFLINT_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(FIXTURES)


def plan(*families, size="small"):
    return bench.plan(bench.BenchRequest(families=list(families), dtypes=["fp32"], size=size, device="cpu"))


# ----------------------------------------------------------------------------- groups and durations


def test_a_fake_duration_table_puts_the_longest_groups_first():
    tasks = plan("toy", "fleet_toy")
    table = DurationTable({GPU: {task.key: 1.0 for task in tasks}})
    slow = next(t for t in tasks if t.family == "fleet_toy" and t.variant == "after" and t.params["n"] == 2048)
    table.update(GPU, {slow.key: 50.0})
    groups = plan_groups(tasks, estimator(table, GPU), workers=2)
    assert slow in groups[0].tasks  # the longest task's group goes first
    assert [g.seconds for g in groups] == sorted((g.seconds for g in groups), reverse=True)
    # Baselines of 10 s (their case's inputs and reference) and 1 s rows: cutting a case would build
    # them again for little, so each case stays whole; equal estimates keep plan order.
    heavy = DurationTable({GPU: {t.key: 10.0 if t.variant == "eager" else 1.0 for t in tasks}})
    whole = plan_groups(tasks, estimator(heavy, GPU), workers=2)
    assert [task for group in whole for task in group.tasks] == tasks
    assert [group.seconds for group in whole] == [14.0, 12.0, 12.0]


def test_without_a_table_the_cost_model_orders_and_cuts():
    tasks = plan("fleet_toy")
    seconds = estimator(DurationTable(), GPU)
    assert [seconds(t) for t in tasks] == [default_seconds(t) for t in tasks]
    # eager (the baseline, holding the case's setup), kills_worker (a triton kind), after (cuda).
    assert seconds(tasks[2]) > seconds(tasks[1])
    groups = plan_groups(tasks, seconds, workers=2)
    # 3 + 5 + 8 s a case, 32 s on two workers: each case cut in two groups of about even length,
    # the second paying the case's setup (3 s, the baseline's estimate) again; the longest first,
    # and of two otherwise equal cases the larger (its reference costs more).
    shown = [([t.variant for t in g.tasks], g.tasks[0].params["n"]) for g in groups]
    assert shown == [
        (["eager", "after"], 2048),
        (["eager", "after"], 1024),
        (["kills_worker"], 2048),
        (["kills_worker"], 1024),
    ]
    assert [g.seconds for g in groups] == pytest.approx([11.0, 11.0, 8.0, 8.0], abs=1e-3)


@settings(max_examples=40, deadline=None)
@given(
    durations=st.lists(st.floats(0.01, 100.0), min_size=18, max_size=18),
    workers=st.integers(1, 8),
)
def test_groups_hold_every_task_once_within_one_case_in_plan_order(durations, workers):
    tasks = plan("toy", "fleet_toy")[:18]
    seconds_of = dict(zip((t.key for t in tasks), durations, strict=False))
    groups = plan_groups(tasks, lambda task: seconds_of[task.key], workers)
    placed = [task for group in groups for task in group.tasks]
    assert sorted(t.key for t in placed) == sorted(t.key for t in tasks)
    position = {task.key: index for index, task in enumerate(tasks)}
    for group in groups:
        assert len({case_key(task) for task in group.tasks}) == 1
        assert [position[t.key] for t in group.tasks] == sorted(position[t.key] for t in group.tasks)
        # a group's estimate is its rows' and, where it is not the baseline's, its case's setup again
        assert group.seconds >= sum(seconds_of[t.key] for t in group.tasks) - 1e-9
    assert [g.seconds for g in groups] == sorted((g.seconds for g in groups), reverse=True)
    for task in tasks:  # the baseline opens the first group of its case
        if task.variant == "eager":
            own = next(g for g in groups if task in g.tasks)
            assert own.tasks[0] == task


def test_the_duration_table_survives_a_round_trip_and_a_bad_file(tmp_path):
    path = tmp_path / "durations.json"
    table = DurationTable({"h100_sxm": {"toy/eager/fp32/n=4096": 1.5}})
    table.save(path)
    assert DurationTable.load(path).seconds == table.seconds
    path.write_text("{not json")
    assert DurationTable.load(path).seconds == {}  # a broken cache falls back to the estimates
    path.write_text(json.dumps({"schema": 99, "seconds": {"x": {"y": 1}}}))
    assert DurationTable.load(path).seconds == {}


# --------------------------------------------------------------------- a fleet of in-process workers

KILLED: set[str] = set()  # task keys that already killed their worker once


def fake_measure(group, topic, tasks, *, device, spec, request, spec_file_text=None):
    """The measuring process's part, played in the worker's thread: each task's row after a short
    pause, streamed as the real one is; a task named in ROOFLINT_TEST_KILL closes its worker the
    first time, as a machine going down mid-task would. Each row carries the phase report a measuring
    process would send with it (a second of measure, a reference read), by both routes."""
    from distributed import get_worker

    worker = get_worker()
    host, _, gpu = str(worker.name).partition("-")
    me = {"group": group, "name": str(worker.name), "host": host}
    worker.log_event(topic, {"kind": "start", **me})
    records, reports = [], {}
    for task in tasks:
        if task.key in os.environ.get("ROOFLINT_TEST_KILL", "").split(";") and task.key not in KILLED:
            KILLED.add(task.key)
            time.sleep(0.3)  # the rows before it leave in the worker's batched stream first
            worker.loop.add_callback(worker.close, nanny=False, executor_wait=False)
            time.sleep(5)
            raise RuntimeError("this worker is gone")
        time.sleep(0.02)
        row = base_row(task, task.kind, OK)
        row.median_ms = 2.0 if task.variant == "eager" else 1.0
        row.speedup_vs_eager = 99.0  # what a measuring process that never saw the kept baseline might say
        row.gpu, row.host, row.device_name, row.device_index = "cpu", host, f"fake {gpu}", int(gpu[-1])
        record = json_safe(dataclasses.asdict(row))
        records.append(record)
        reports[task.key] = [[{"phases_s": {"measure": 1.0}, "counts": {"reference_hits": 1}}, task.family]]
        worker.log_event(topic, {"kind": "row", "record": record, "seconds": 0.5, "reports": reports[task.key], **me})
    return {"records": records, "seconds": {}, "reports": reports, "log": "", **me}


@pytest.fixture(scope="module")
def simulated_hosts():
    """Two 'hosts' of two workers each, every worker one fake GPU of the same type, named host-gpuN."""
    names = ["hosta-gpu0", "hosta-gpu1", "hostb-gpu2", "hostb-gpu3"]
    cluster = local_cluster([LocalWorker(name, (GPU,)) for name in names], in_process=True)
    yield cluster
    cluster.close()


def fleet_bench(cluster, out, monkeypatch, on_row=lambda row: None, families=("toy", "fleet_toy")):
    monkeypatch.setattr(fleet_client, "measure_group", fake_measure)
    # The fake rows are judged and drawn against nothing: no CPU ceilings, no plots.
    monkeypatch.setattr(bench, "cpu_ceilings", lambda: None)
    monkeypatch.setattr(bench, "write_plots", lambda *args: [])
    address = cluster.scheduler_address
    request = bench.BenchRequest(
        families=list(families), dtypes=["fp32"], size="small", device="cpu", scheduler=address, out=out
    )
    return bench.execute(bench.prepare(request), on_row)


def read_rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_killed_worker_has_its_task_run_again_on_a_peer(simulated_hosts, tmp_path, monkeypatch):
    tasks = plan("toy", "fleet_toy")
    victim = next(t for t in tasks if t.family == "fleet_toy" and t.variant == "kills_worker")
    monkeypatch.setenv("ROOFLINT_TEST_KILL", victim.key)
    outcome = fleet_bench(simulated_hosts, tmp_path, monkeypatch)
    rows = read_rows(tmp_path / "results.csv")
    # Every row once, in the order of a one-GPU run, though they landed as they finished.
    assert [f"{r['family']}/{r['variant']}/{r['dtype']}/{r['shape']}" for r in rows] == [t.key for t in tasks]
    assert [r.family for r in outcome.rows] == [r["family"] for r in rows]
    assert all(r["status"] == "ok" for r in rows)
    # Host and device on every row, from four workers on two hosts.
    assert {(r["host"], r["device_name"]) for r in rows} <= {
        ("hosta", "fake gpu0"),
        ("hosta", "fake gpu1"),
        ("hostb", "fake gpu2"),
        ("hostb", "fake gpu3"),
    }
    # Speedups against the baseline row kept for each case (eager 2 ms, the others 1 ms).
    assert {r["speedup_vs_eager"] for r in rows if r["variant"] != "eager"} == {"2.0"}
    log = (tmp_path / "fleet.log").read_text()
    died = next(line for line in log.splitlines() if "its worker died under it on" in line)
    dead = died.split("under it on ")[1].split(";")[0]
    again = next(line for line in log.splitlines() if "started again on" in line)
    peer = again.split("started again on ")[1].split(" ")[0]
    assert peer != dead and peer.startswith("host")  # a peer of the same GPU type took it
    # Each kept row's phases are tallied once, though both routes carry them and a retry ran; the
    # phases are GPU-seconds over every worker that ran a task.
    run = json.loads((tmp_path / "results.json").read_text())["run"]
    assert run["phases_s"]["measure"] == len(tasks) and run["caches"]["reference"]["hits"] == len(tasks)
    per_family = Counter(t.family for t in tasks)
    assert run["phases_by_family_s"] == {family: {"measure": n} for family, n in per_family.items()}
    started = {line.split(" on ")[1].split(" ")[0] for line in log.splitlines() if ": started " in line}
    assert run["workers"] == len(started) > 1 and run["phase_basis"] == "gpu_seconds"
    table = json.loads((tmp_path / "cache" / "fleet" / "durations.json").read_text())
    assert set(table["seconds"][GPU]) == {t.key for t in tasks}  # the next run's order


def test_ctrl_c_keeps_every_finished_row_on_disk(simulated_hosts, tmp_path, monkeypatch):
    monkeypatch.delenv("ROOFLINT_TEST_KILL", raising=False)
    received = []

    def interrupt_after_three(row):
        received.append(row)
        if len(received) == 3:
            raise KeyboardInterrupt

    outcome = fleet_bench(simulated_hosts, tmp_path, monkeypatch, interrupt_after_three)
    assert outcome.interrupted
    rows = read_rows(tmp_path / "results.csv")
    assert len(rows) == len(outcome.rows) == 3
    assert sorted(r["variant"] + r["shape"] for r in rows) == sorted(r.variant + r.shape for r in received)
    assert len(json.loads((tmp_path / "results.json").read_text())["rows"]) == 3
