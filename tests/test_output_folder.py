"""The output folder: one bench writes it at a time (a dead bench's lock is taken over, and two
benches that find the same dead lock never both hold it), and a new run moves the last one's
results and rooflines aside before it writes its own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from rooflint.core.errors import UserError
from rooflint.outputs.folder_lock import LOCK_NAME, FolderLock


def _lock_text(pid: int) -> str:
    return json.dumps({"pid": pid, "host": socket.gethostname(), "started": "then", "command": "rooflint bench"})


@pytest.fixture
def live_pid():
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield other.pid
    other.kill()
    other.wait()


@pytest.fixture
def dead_pid():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def test_a_dead_benchs_lock_is_taken_over_and_released(tmp_path, dead_pid):
    (tmp_path / LOCK_NAME).write_text(_lock_text(dead_pid))
    with FolderLock(tmp_path):
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert not (tmp_path / LOCK_NAME).exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no scratch or set-aside file left


def test_a_live_benchs_lock_refuses_the_folder_in_one_line(tmp_path, live_pid):
    (tmp_path / LOCK_NAME).write_text(_lock_text(live_pid))
    with pytest.raises(UserError, match=f"in use by another bench \\(pid {live_pid} on"):
        FolderLock(tmp_path).__enter__()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == live_pid


def test_a_lock_judged_dead_but_replaced_meanwhile_is_put_back_not_deleted(tmp_path, live_pid, dead_pid):
    # Two benches found the same dead lock; the first cleared it and linked its own. The second,
    # acting on what it read before, must leave the first's lock in place.
    fresh = _lock_text(live_pid)
    (tmp_path / LOCK_NAME).write_text(fresh)
    # It moves the lock aside, sees it is not the dead one it judged, and puts it back.
    assert FolderLock(tmp_path).clear_stale(seen=_lock_text(dead_pid)) is False
    assert (tmp_path / LOCK_NAME).read_text() == fresh
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_NAME]


def test_leaving_never_removes_another_benchs_lock(tmp_path, live_pid):
    lock = FolderLock(tmp_path)
    lock.__enter__()
    (tmp_path / LOCK_NAME).write_text(_lock_text(live_pid))  # ours lost, another's in its place
    lock.__exit__(None, None, None)
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == live_pid


def test_a_new_run_moves_the_last_runs_results_and_rooflines_aside(tmp_path):
    # A rerun with --no-plots (or one cut short before its plots) must not leave the last run's
    # roofline beside its own results as if it drew them.
    from rooflint.engine.bench import keep_previous

    names = ["results.csv", "results.json", "roofline.png", "roofline.svg", "roofline.csv", "roofline-h100_sxm.png"]
    for name in [*names, "report.md", "roofline.prev.png"]:
        (tmp_path / name).write_text(name)
    keep_previous(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [
            "report.md",
            "results.prev.csv",
            "results.prev.json",
            "roofline.prev.png",
            "roofline.prev.svg",
            "roofline.prev.csv",
            "roofline-h100_sxm.prev.png",
        ]
    )
    assert (tmp_path / "roofline.prev.png").read_text() == "roofline.png"  # the last run's, not an older one
