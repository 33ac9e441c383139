"""A bench stopped by a signal keeps what it measured: Ctrl-C stops it and its worker without a
traceback; SIGTERM (kill, a CI job's timeout) stops it as Ctrl-C does, results.json and all, with
its worker; a SIGINT the bench was started to ignore (a shell's background job) reaches no row.
Each runs the installed `rooflint` console script on the CPU with the `fragile` family of
tests/fixtures, whose `slow` variant waits for a file the test writes, so the signal lands while a
row is being measured, not before or after the run.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import cpu_ceilings
import pytest
from console_script import ROOFLINT, needs_console_script

FIXTURES = str(Path(__file__).parent / "fixtures")

pytestmark = [
    needs_console_script,
    pytest.mark.xdist_group("signals"),
]


def statuses(path: Path) -> dict[str, str]:
    with path.open(newline="") as handle:
        return {row["variant"]: row["status"] for row in csv.DictReader(handle)}


def start(tmp_path: Path, ignore_sigint: bool = False) -> subprocess.Popen:
    """A bench of the fragile family in a session of its own, its `slow` variant held until
    tmp_path/go exists; returned once the rows before it (eager, killed) are on disk and `slow` is being built."""
    env = dict(
        os.environ,
        ROOFLINT_CACHE=str(tmp_path / "cache"),
        COLUMNS="200",
        ROOFLINT_FAMILY_MODULES="fragile_family",
        ROOFLINT_TEST_HOLD=str(tmp_path / "go"),
        ROOFLINT_TEST_HELD=str(tmp_path / "held"),
        PYTHONPATH=FIXTURES + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    cpu_ceilings.seed(env["ROOFLINT_CACHE"])
    env.pop("ROOFLINT_DEBUG", None)
    argv = [ROOFLINT, "bench", "fragile", "--device", "cpu", "--dtype", "fp32", "--out", "out", "--no-plots"]
    # As a shell starts a background job without job control: SIGINT ignored, inherited by children.
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None
    running = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=ignore,
    )
    results, deadline = tmp_path / "out" / "results.csv", time.monotonic() + 120
    while not (results.exists() and "killed" in statuses(results)):
        if running.poll() is not None or time.monotonic() > deadline:
            running.kill()
            out, err = running.communicate()
            raise AssertionError(f"the bench ended (exit {running.returncode}) before the signal: {out}{err}")
        time.sleep(0.2)
    while not (tmp_path / "held").exists():  # the worker is now holding inside `slow`
        if running.poll() is not None or time.monotonic() > deadline:
            running.kill()
            out, err = running.communicate()
            raise AssertionError(f"the bench ended (exit {running.returncode}) before `slow`: {out}{err}")
        time.sleep(0.05)
    return running


def test_sigterm_stops_a_bench_as_ctrl_c_does_and_its_worker_with_it(tmp_path):
    running = start(tmp_path)
    os.kill(running.pid, signal.SIGTERM)  # the bench alone, as `kill PID` or a CI runner's timeout sends it
    try:
        out, err = running.communicate(timeout=20)  # not after the held row: `go` is never written
    finally:
        (tmp_path / "go").touch()  # a worker left behind (the bug) finishes and exits
    assert running.returncode == 130, out + err
    assert "interrupted" in err and "Traceback" not in out + err
    assert statuses(tmp_path / "out" / "results.csv") == {"eager": "ok", "killed": "ok"}
    record = json.loads((tmp_path / "out" / "results.json").read_text())  # written, as after Ctrl-C
    assert record["run"]["rows"] == 2
    assert not (tmp_path / "out" / ".rooflint.lock").exists()


def test_a_sigint_the_bench_ignores_reaches_no_row(tmp_path):
    running = start(tmp_path, ignore_sigint=True)
    os.killpg(running.pid, signal.SIGINT)  # a Ctrl-C meant for the shell that started the job
    time.sleep(1.0)
    (tmp_path / "go").touch()
    out, err = running.communicate(timeout=120)
    assert running.returncode == 0, out + err
    assert statuses(tmp_path / "out" / "results.csv") == {"eager": "ok", "killed": "ok", "slow": "ok"}


def test_ctrl_c_stops_the_run_without_a_traceback_in_worker_log(tmp_path):
    running = start(tmp_path)
    os.killpg(running.pid, signal.SIGINT)  # the bench and its worker together, as a terminal's Ctrl-C
    out, err = running.communicate(timeout=120)
    assert running.returncode == 130, out + err
    assert "interrupted" in err and "Traceback" not in out + err
    log = (tmp_path / "out" / "worker.log").read_text()
    assert "Traceback" not in log and "BrokenPipeError" not in log
    assert statuses(tmp_path / "out" / "results.csv") == {"eager": "ok", "killed": "ok"}  # kept


def test_a_bench_killed_outright_keeps_its_rows_and_its_worker_ends(tmp_path):
    """SIGKILL (the OOM killer, a runner's hard stop): the bench cleans up nothing, yet the rows
    written before stay, and its measuring process, held inside `slow`, ends with it (parent_watch)
    instead of timing on, orphaned."""
    psutil = pytest.importorskip("psutil")
    running = start(tmp_path)
    workers = psutil.Process(running.pid).children()
    assert workers, "the bench has no measuring process"
    try:
        os.kill(running.pid, signal.SIGKILL)
        running.communicate(timeout=60)
        _, alive = psutil.wait_procs(workers, timeout=30)
        assert alive == [], "the measuring process outlived its bench"
        assert statuses(tmp_path / "out" / "results.csv") == {"eager": "ok", "killed": "ok"}
    finally:
        (tmp_path / "go").touch()
