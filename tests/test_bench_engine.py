"""bench end to end on CPU: statuses, the CSV schema, rows kept through failures, plots and JUnit."""

import csv
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflint.cli.app import app
from rooflint.outputs.results import COLUMNS, ResultRow, ResultWriter

FIXTURES = str(Path(__file__).parent / "fixtures")


@pytest.fixture
def toy_env(monkeypatch):
    monkeypatch.setenv("ROOFLINT_FAMILY_MODULES", "toy_family")
    monkeypatch.setenv("PYTHONPATH", FIXTURES + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.syspath_prepend(FIXTURES)


def read_rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_failures_crashes_and_errors_become_rows_and_the_run_goes_on(toy_env, tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "toy",
            "--device",
            "cpu",
            "--dtype",
            "fp32",
            "--out",
            str(tmp_path),
            "--junit",
            str(tmp_path / "j.xml"),
            "--no-plots",
        ],
    )
    # Failed, errored and crashed rows make the run exit 1, after every row is on disk.
    assert result.exit_code == 1, result.output
    rows = {row["variant"]: row for row in read_rows(tmp_path / "results.csv")}
    assert rows["eager"]["status"] == "ok"
    assert rows["wrong"]["status"] == "failed" and "exceeds tolerance" in rows["wrong"]["message"]
    assert rows["raises"]["status"] == "error" and "planted build failure" in rows["raises"]["message"]
    assert rows["crashes"]["status"] == "crashed" and "exit 7" in rows["crashes"]["message"]
    assert rows["after_crash"]["status"] == "ok"
    assert float(rows["after_crash"]["median_ms"]) > 0
    # A failed variant carries its error but no timing: it can never be plotted as a point.
    assert rows["wrong"]["median_ms"] in ("", "nan")
    suites = ET.parse(tmp_path / "j.xml").getroot()
    cases = {case.get("name").split("[")[0]: case for case in suites.iter("testcase")}
    assert cases["wrong"].find("failure") is not None
    assert cases["crashes"].find("error") is not None
    assert cases["eager"].find("failure") is None and cases["eager"].find("error") is None


def test_cpu_bench_writes_schema_plots_and_skips_gpu_variants(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "vector_add",
            "--device",
            "cpu",
            "--dtype",
            "fp32",
            "--variants",
            "eager,triton,cuda",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    with open(tmp_path / "results.csv", newline="") as handle:
        assert next(csv.reader(handle)) == COLUMNS
    rows = {row["variant"]: row for row in read_rows(tmp_path / "results.csv")}
    assert set(rows) == {"eager", "triton", "cuda"}
    assert rows["triton"]["status"] == "skipped" and rows["triton"]["message"] == "needs a CUDA GPU"
    assert rows["cuda"]["status"] == "skipped"
    eager = rows["eager"]
    assert eager["status"] == "ok" and eager["gpu"] == "cpu" and eager["ceiling_source"] == "measured"
    assert eager["timing_mode"] == "cpu_wall" and int(eager["n_samples"]) >= 10
    assert float(eager["p20_ms"]) <= float(eager["median_ms"]) <= float(eager["p80_ms"])
    assert float(eager["ideal_bytes"]) == 3 * 4 * 1_000_003
    assert abs(float(eager["achieved_gbps"]) - 12_000_036 / float(eager["median_ms"]) / 1e6) < 1e-6 * float(
        eager["achieved_gbps"]
    )
    for name in ("roofline.png", "roofline.svg", "roofline.csv", "results.json"):
        assert (tmp_path / name).stat().st_size > 0
    plotted = read_rows(tmp_path / "roofline.csv")
    assert [p["label"] for p in plotted if p["point_kind"] == "measured"] == ["vector_add/eager fp32"]


def test_rows_are_on_disk_before_the_run_ends(tmp_path):
    writer = ResultWriter(tmp_path)
    writer.append(ResultRow("f", "v", "eager", "fp32", "small", "n=1", "ok", median_ms=1.5))
    on_disk = read_rows(tmp_path / "results.csv")  # the writer is still open: no close() yet
    assert len(on_disk) == 1 and on_disk[0]["median_ms"] == "1.5"
    writer.close()


def test_shards_keep_families_whole_and_balance_by_task_count():
    from rooflint.engine.bench import shard
    from rooflint.engine.worker import Task

    tasks = [Task("a", f"v{i}", "bf16", "large", {"n": 1}) for i in range(5)]
    tasks += [Task("b", f"v{i}", "bf16", "large", {"n": 1}) for i in range(3)]
    tasks += [Task("c", f"v{i}", "bf16", "large", {"n": 1}) for i in range(2)]
    shards = shard(tasks, [0, 1, 3])
    families = {device: {t.family for t in shard_tasks} for device, shard_tasks in shards.items()}
    assert families == {0: {"a"}, 1: {"b"}, 3: {"c"}}
    assert sorted(t.key for s in shards.values() for t in s) == sorted(t.key for t in tasks)


def test_sharded_run_keeps_every_shard_rows_when_one_crashes(toy_env, tmp_path):
    from rooflint.engine.bench import BenchPlan, BenchRequest, plan, run
    from rooflint.engine.ceilings import measure_cpu_ceilings

    request = BenchRequest(
        families=["toy", "vector_add"],
        variants=["eager", "after_crash", "crashes"],
        dtypes=["fp32"],
        device="cpu",
        devices=[4, 7],
        size="small",
    )
    writer = ResultWriter(tmp_path)
    # prepare() would refuse GPU indices on a CPU run; the test shards CPU workers through run() directly.
    run(BenchPlan(request, plan(request)), writer, measure_cpu_ceilings(), lambda row: None)
    writer.close()
    rows = read_rows(tmp_path / "results.csv")
    by_key = {(r["family"], r["variant"]): r for r in rows}
    assert by_key[("toy", "crashes")]["status"] == "crashed"
    assert by_key[("toy", "after_crash")]["status"] == "ok"
    assert by_key[("vector_add", "eager")]["status"] == "ok"
    # Each family ran in its own worker with its own device: toy went to one GPU index, and the
    # worker restarted after the crash kept it.
    assert by_key[("toy", "after_crash")]["message"] in ("CUDA_VISIBLE_DEVICES=4", "CUDA_VISIBLE_DEVICES=7")
    assert {p.name for p in tmp_path.glob("worker-gpu*.log")} == {"worker-gpu4.log", "worker-gpu7.log"}


def test_rows_record_which_gpu_index_measured_them(monkeypatch):
    import torch

    from rooflint.engine import environment

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,6")
    assert environment.physical_gpu_index() == 6  # nvidia-smi's numbering, not the remapped one
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert environment.physical_gpu_index() == 1


def test_a_kept_measuring_process_takes_many_jobs_and_is_restarted_after_a_crash(toy_env, tmp_path):
    """What a Dask worker does (fleet/task.py): one child across task groups, not one per group."""
    from rooflint.engine.bench import BenchRequest, plan
    from rooflint.engine.ceilings import measure_cpu_ceilings
    from rooflint.engine.measuring import MeasuringProcess, run_worker

    request = BenchRequest(families=["toy"], variants=["eager", "crashes", "after_crash"], dtypes=["fp32"])
    request.device, request.size = "cpu", "small"
    tasks = {t.variant: t for t in plan(request)}
    spec, rows = measure_cpu_ceilings(), []
    process = MeasuringProcess(None, tmp_path / "worker.log")

    def run(*variants):
        kw = dict(device="cpu", device_index=None, spec=spec, request=request, log_path=process.log_path)
        run_worker([tasks[v] for v in variants], on_row=rows.append, process=process, **kw)

    try:
        run("eager")
        first = process.process.pid
        run("eager")
        assert process.process.pid == first  # the second job went to the same child
        run("crashes", "after_crash")
        assert [(r.variant, r.status) for r in rows] == [
            ("eager", "ok"),
            ("eager", "ok"),
            ("crashes", "crashed"),
            ("after_crash", "ok"),
        ]
        assert process.process.pid != first  # the crash took the child down; a new one took the rest
    finally:
        process.close()
    assert process.process is None
