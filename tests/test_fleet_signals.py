"""Ctrl-C to a fleet's client, as a user sends it: the installed `rooflint` console script runs
`bench --scheduler local --device cpu` on the `fragile` family of tests/fixtures, whose `slow`
variant waits for a file the test never writes until the end, so the signal lands mid-task.

The rows received stay on disk, the exit is 130 without a traceback, and the measuring process of
the cancelled task goes with the client instead of going on timing, orphaned, after it exited; so it
does when the client is killed outright and cleans up nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import cpu_ceilings
import pytest
from console_script import ROOFLINT, needs_console_script

pytest.importorskip("distributed", reason="the fleet tests need the rooflint[dask] extra")
psutil = pytest.importorskip("psutil")

FIXTURES = str(Path(__file__).parent / "fixtures")

pytestmark = [
    needs_console_script,
    pytest.mark.xdist_group("fleet_console"),
]


def measuring_processes(hold: str) -> list:
    """This test's live measuring processes: started as `python -c WORKER_BOOT`, with its hold file."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            if any("rooflint.engine.worker" in part for part in process.cmdline()):
                if process.environ().get("ROOFLINT_TEST_HOLD") == hold:
                    found.append(process)
        except psutil.Error:
            pass  # gone meanwhile, or not ours to read
    return found


def start_held(tmp_path, hold: str) -> subprocess.Popen:
    """The fleet bench of `fragile`, once its measuring process is held inside `slow` (the fixture
    creates the HELD file as its wait begins: a fixed sleep once sent the signal before `slow` was
    reached, while eager and killed were still measured)."""
    held = Path(hold + ".held")
    env = dict(
        os.environ,
        ROOFLINT_CACHE=str(tmp_path / "cache"),
        COLUMNS="200",
        ROOFLINT_FAMILY_MODULES="fragile_family",
        ROOFLINT_TEST_HOLD=hold,
        ROOFLINT_TEST_HELD=str(held),
        PYTHONPATH=FIXTURES + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    cpu_ceilings.seed(env["ROOFLINT_CACHE"])
    env.pop("ROOFLINT_DEBUG", None)
    argv = [ROOFLINT, "bench", "fragile", "--scheduler", "local", "--device", "cpu", "--dtype", "fp32"]
    argv += ["--out", "out", "--no-plots"]
    running = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while not held.exists():
        if running.poll() is not None or time.monotonic() > deadline:
            running.kill()
            raise AssertionError("the task never reached `slow`: " + "".join(running.communicate()))
        time.sleep(0.1)
    assert measuring_processes(hold), "held inside `slow`, but no measuring process of this test is seen"
    return running


def gone_within(hold: str, seconds: float) -> list:
    deadline = time.monotonic() + seconds
    while measuring_processes(hold) and time.monotonic() < deadline:
        time.sleep(0.2)
    return measuring_processes(hold)


def test_ctrl_c_to_a_fleet_client_stops_its_measuring_process(tmp_path):
    hold = str(tmp_path / "go")
    running = start_held(tmp_path, hold)
    try:
        os.kill(running.pid, signal.SIGINT)
        out, err = running.communicate(timeout=60)
        assert running.returncode == 130, out + err
        assert "interrupted" in err and "Traceback" not in out + err
        # Killed as the client closes, or (one started for a task the worker had queued) ended by its
        # parent watch once the closed Dask worker is gone: either within seconds; the bug held on for
        # the five minutes `slow` waits.
        assert gone_within(hold, 15) == []
    finally:
        Path(hold).touch()  # a measuring process left behind (the bug) finishes and exits
        if running.poll() is None:
            running.kill()
            running.communicate()


def test_a_fleet_client_killed_outright_leaves_no_measuring_process(tmp_path):
    """SIGKILL (the OOM killer, a CI runner's hard stop): the client cleans up nothing, its Dask
    workers go with it, and each measuring process ends when its worker is gone (parent_watch)."""
    hold = str(tmp_path / "go")
    running = start_held(tmp_path, hold)
    try:
        os.kill(running.pid, signal.SIGKILL)
        running.communicate(timeout=60)
        assert gone_within(hold, 30) == []
    finally:
        Path(hold).touch()
        if running.poll() is None:
            running.kill()
            running.communicate()
