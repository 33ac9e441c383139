"""Fleets on CPU: local Dask clusters of CPU workers with fake GPU-type resources run real plans.

The workers run bench's own measuring processes; tests/fixtures/fleet_family.py kills the Dask
worker from inside a task, as a machine going down would.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections import Counter
from pathlib import Path

import cpu_ceilings
import pytest

pytest.importorskip("distributed", reason="the fleet tests need the rooflint[dask] extra")

from typer.testing import CliRunner  # noqa: E402

from rooflint.cli.app import app  # noqa: E402
from rooflint.core.errors import UserError  # noqa: E402
from rooflint.engine import bench  # noqa: E402
from rooflint.engine.fleet.cluster import LocalWorker, local_cluster  # noqa: E402
from rooflint.engine.fleet.resources import choose_labels, offered_labels  # noqa: E402
from rooflint.engine.run_clock import summary_line  # noqa: E402

FIXTURES = str(Path(__file__).parent / "fixtures")
# The module's cluster of two worker processes starts once, on one worker of the suite.
pytestmark = pytest.mark.xdist_group("fleet")


@pytest.fixture(scope="module")
def fleet_env(tmp_path_factory):
    """The fixture families, in this process and in every worker process started after this.

    fleet_toy's kills_worker kills its Dask worker once at n=1024 and every time at n=2048; only the
    test of lost workers runs it.
    """
    marker = tmp_path_factory.mktemp("fleet") / "killed-once"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ROOFLINT_FAMILY_MODULES", "toy_family,fleet_family")
        patch.setenv("PYTHONPATH", FIXTURES + os.pathsep + os.environ.get("PYTHONPATH", ""))
        patch.setenv("ROOFLINT_TEST_PID", str(os.getpid()))
        patch.setenv("ROOFLINT_TEST_KILL_ONCE", f"1024:{marker}")
        patch.setenv("ROOFLINT_TEST_KILL_ALWAYS_N", "2048")
        # The duration table (none: the cost model cuts and orders) and the compilers' caches.
        patch.setenv("ROOFLINT_CACHE", str(marker.parent / "cache"))
        cpu_ceilings.seed(marker.parent / "cache")  # the CPU's, measured once per test process, not by the first run
        patch.syspath_prepend(FIXTURES)
        yield marker


@pytest.fixture(scope="module")
def cluster(fleet_env):
    """Two single-threaded worker processes, as `dask worker --nthreads 1` twice would be: both of
    fake GPU type "fake" (a task lost on one runs again on the other) and each of its own type too,
    "fake_a" or "fake_b", 'pinned' through CUDA_VISIBLE_DEVICES to a GPU index toy reports."""
    workers = [
        LocalWorker("a0", ("fake", "fake_a"), {"CUDA_VISIBLE_DEVICES": "4"}),
        LocalWorker("b0", ("fake", "fake_b"), {"CUDA_VISIBLE_DEVICES": "7"}),
    ]
    cluster = local_cluster(workers)
    yield cluster
    cluster.close()


def read_rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def run_bench(scheduler, out, on_row=lambda row: None, **fields):
    request = bench.BenchRequest(device="cpu", dtypes=["fp32"], size="small", scheduler=scheduler, out=out, **fields)
    return bench.execute(bench.prepare(request), on_row)


def test_each_gpu_type_runs_the_whole_plan_into_one_csv(cluster, tmp_path):
    outcome = run_bench(cluster.scheduler_address, tmp_path, families=["toy"], gpu_types=["fake_a", "fake_b"])
    rows = read_rows(tmp_path / "results.csv")
    assert len(rows) == len(outcome.rows) == 2 * 5  # toy's five variants, once per GPU type
    # The toy variant reports the GPU its worker was pinned to: one row from each worker.
    pinned = sorted(row["message"] for row in rows if row["variant"] == "after_crash")
    assert pinned == ["CUDA_VISIBLE_DEVICES=4", "CUDA_VISIBLE_DEVICES=7"]
    statuses = Counter((row["variant"], row["status"]) for row in rows)
    expected = [
        ("eager", "ok"),
        ("wrong", "failed"),
        ("raises", "error"),
        ("crashes", "crashed"),
        ("after_crash", "ok"),
    ]
    assert statuses == Counter({key: 2 for key in expected})
    # The measuring code of a local run: the correctness gate, the restart after a crash; every row,
    # the crashed one too, names the host that measured it.
    assert "process died (exit 7)" in next(row["message"] for row in rows if row["variant"] == "crashes")
    assert all(row["host"] for row in rows)
    assert outcome.exit_code == 1
    log = (tmp_path / "fleet.log").read_text()
    assert "GPU types, each running the whole plan: fake_a, fake_b" in log
    assert re.search(r"fake_a/toy/fp32/n=4096/\S+: finished on a0", log)
    assert re.search(r"fake_b/toy/fp32/n=4096/\S+: finished on b0", log)
    # The measuring processes' phase seconds and cache counts came back with their rows: the run
    # record holds them, GPU-seconds summed over the two workers, and the summary says so.
    run = json.loads((tmp_path / "results.json").read_text())["run"]
    assert run == outcome.run
    assert run["workers"] == 2 and run["phase_basis"] == "gpu_seconds"
    for phase in ("startup", "inputs", "reference", "compile", "check", "measure"):
        assert run["phases_s"][phase] > 0, phase
    assert run["phases_by_family_s"]["toy"]["measure"] > 0
    assert run["other_s"] >= 0
    reference = run["caches"]["reference"]
    assert reference["hits"] + reference["misses"] + reference["recomputed"] >= 2  # a case on each GPU type
    assert set(run["caches"]) == {"reference", "build", "triton", "inductor", "autotune"}
    assert summary_line(run).startswith(f"wall {run['wall_s']:.0f} s, phases in GPU-seconds over 2 workers: measure ")


def test_an_unknown_gpu_type_is_one_clear_line(cluster, tmp_path):
    with pytest.raises(UserError, match=r"--gpu-types 'h100': no worker offers it; valid: fake, fake_a, fake_b"):
        run_bench(cluster.scheduler_address, tmp_path, families=["toy"], gpu_types=["h100"])


def test_a_killed_worker_is_retried_and_a_task_lost_twice_becomes_error_rows(cluster, fleet_env, tmp_path):
    # Without a duration table each case is cut in two tasks, [eager, after] and [kills_worker]
    # (tests/test_fleet_schedule.py): a worker killed by kills_worker costs only that task.
    run_bench(cluster.scheduler_address, tmp_path, families=["fleet_toy"], gpu_types=["fake"])
    assert fleet_env.exists()  # a worker process really died mid-task
    rows = read_rows(tmp_path / "results.csv")
    # Every row once, in plan order.
    keys = [(row["variant"], row["shape"]) for row in rows]
    assert keys == [(v, s) for s in ("n=1024", "n=2048") for v in ("eager", "kills_worker", "after")]
    by_key = {(row["variant"], row["shape"]): row for row in rows}
    # n=1024 lost its worker once and ran again, on the other worker: every row measured.
    assert [by_key[(v, "n=1024")]["status"] for v in ("eager", "kills_worker", "after")] == ["ok"] * 3
    # n=2048's kills_worker killed its worker on both tries: an error row that says why.
    assert [by_key[(v, "n=2048")]["status"] for v in ("eager", "after")] == ["ok"] * 2
    row = by_key[("kills_worker", "n=2048")]
    assert row["status"] == "error", row
    assert "lost on the cluster (started 2 times): KilledWorker" in row["message"]
    log = (tmp_path / "fleet.log").read_text()
    # Both kills_worker tasks kill their workers at about the same time here, so the retry may find
    # no live peer and take the restarted worker; tests/test_fleet_schedule.py checks the peer.
    assert "fake/fleet_toy/fp32/n=1024/kills_worker: its worker died under it on" in log
    assert "fake/fleet_toy/fp32/n=1024/kills_worker: started again on" in log


def test_ctrl_c_keeps_every_row_received(fleet_env, tmp_path):
    import psutil

    received = []

    def interrupt_after_two(row):
        received.append(row)
        if len(received) == 2:
            raise KeyboardInterrupt

    # --scheduler local on a CPU: a cluster of one worker on this machine.
    outcome = run_bench("local", tmp_path, interrupt_after_two, families=["toy"])
    assert outcome.interrupted
    rows = read_rows(tmp_path / "results.csv")
    assert len(rows) == len(outcome.rows) == 2
    assert [(r["variant"], r["status"]) for r in rows] == [(r.variant, r.status) for r in received]
    assert "GPU types, each running the whole plan: cpu" in (tmp_path / "fleet.log").read_text()
    # The measuring process of the cancelled task does not go on timing after the client stopped.
    # (A killed one may linger as a zombie until its Dask worker's exit gets it reaped: it times nothing.)
    leftover = []
    for process in psutil.Process().children(recursive=True):
        try:
            running = process.status() != psutil.STATUS_ZOMBIE
            if running and any("rooflint.engine.worker" in part for part in process.cmdline()):
                leftover.append(process)
        except psutil.Error:
            pass  # gone meanwhile
    assert leftover == []


def test_gpu_types_match_worker_labels_by_gpu_name():
    workers = {
        "tcp://a:1": {"name": "a", "resources": {"GPU": 1, "gpu-h100_sxm": 1}},
        "tcp://b:1": {"name": "b", "resources": {"GPU": 1, "gpu-a100_80gb_sxm": 1}},
        "tcp://c:1": {"name": "c", "resources": {}},  # no GPU: never given a task
    }
    offered = offered_labels(workers)
    assert offered == {"h100_sxm": ["a"], "a100_80gb_sxm": ["b"]}
    assert choose_labels([], offered) == ["a100_80gb_sxm", "h100_sxm"]
    assert choose_labels(["h100", "a100"], offered) == ["h100_sxm", "a100_80gb_sxm"]  # aliases find their key
    with pytest.raises(UserError, match="no worker of the cluster offers a GPU"):
        choose_labels([], offered_labels({"tcp://c:1": workers["tcp://c:1"]}))


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--gpu-types", "h100"], "--gpu-types chooses among the GPU types of a Dask cluster"),
        (["--scheduler", "tcp://10.0.0.1:8786", "--devices", "0,1"], "--devices picks GPUs of this machine"),
    ],
)
def test_fleet_options_misused_are_one_clear_line(args, fragment, tmp_path):
    result = CliRunner().invoke(app, ["bench", "vector_add", "--device", "cpu", "--out", str(tmp_path), *args])
    assert result.exit_code == 2 and fragment in result.output, result.output


def test_scheduler_without_dask_says_how_to_install_it(monkeypatch):
    from rooflint.engine.fleet import request

    monkeypatch.setattr(request, "dask_installed", lambda: False)
    with pytest.raises(UserError, match=r'needs Dask, which is not installed: pip install "rooflint\[dask\]"'):
        bench.prepare(bench.BenchRequest(families=["vector_add"], device="cpu", scheduler="local"))
    result = CliRunner().invoke(app, ["bench", "vector_add", "--device", "cpu", "--scheduler", "local"])
    assert result.exit_code == 2 and 'pip install "rooflint[dask]"' in result.output, result.output
    # Without Dask, several --devices keep the pool of one worker process per GPU.
    several = bench.BenchRequest(devices=[0, 1])
    request.settle(several)
    assert several.scheduler is None


def test_row_gpu_keys_parse_the_spec_file_once_per_label_until_it_changes(tmp_path, monkeypatch):
    # The client stamps every streamed row with gpu_key(label, spec_file): one parse per label, not
    # per row; an edited spec file is read again.
    from rooflint.engine.fleet import resources

    spec_file = tmp_path / "mine.toml"
    table = 'name = "{}"\nmatch = ["{}"]\nmemory_bandwidth_gbps = 1000\ncuda_fp32_tflops = 10\n'
    spec_file.write_text("[mygpu]\n" + table.format("My GPU", "MyGPU"))
    calls = []
    real = resources.get_spec
    monkeypatch.setattr(resources, "get_spec", lambda name, file=None: calls.append(name) or real(name, file))
    resources._spec_key_of.cache_clear()
    keys = [resources.gpu_key("mygpu", str(spec_file)) for _ in range(50)]
    assert keys == ["mygpu"] * 50 and len(calls) == 1
    spec_file.write_text("[other]\n" + table.format("Other", "Other") + "\n")
    assert resources.gpu_key("mygpu", str(spec_file)) == "" and len(calls) == 2  # no longer in the file
    assert resources.gpu_key(resources.ANY, str(spec_file)) == ""
