"""A measuring process ends when its parent does, even mid-task, instead of timing on, orphaned."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from rooflint.engine.parent_watch import ORPHANED_EXIT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def alive(pid: int) -> bool:
    """Running or sleeping; a zombie (dead, not yet reaped by whoever adopted it) counts as gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)


def run_watch(parent: str) -> subprocess.CompletedProcess:
    code = textwrap.dedent(
        f"""
        import os, time
        from rooflint.engine.parent_watch import end_with_parent
        end_with_parent({parent}, poll_s=0.05)
        time.sleep(1.0)
        print("outlived the watch")
        """
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_a_process_whose_parent_lives_goes_on():
    done = run_watch("os.getppid()")
    assert done.returncode == 0 and "outlived the watch" in done.stdout, done.stderr


def test_a_process_whose_parent_is_gone_ends_at_once():
    done = run_watch("os.getppid() + 1_000_000")  # a parent it no longer has: it was adopted
    assert done.returncode == ORPHANED_EXIT and "outlived" not in done.stdout, done.stderr


def test_a_measuring_process_ends_when_its_starter_is_killed_mid_start():
    """The starter dies while the worker still imports torch, before its watch starts: the worker
    watches the pid its starter wrote in its environment, not the parent it finds once started.
    Its stdin stays open (this test holds it), so only the watch can end it."""
    starter = textwrap.dedent(
        """
        import subprocess, sys, time
        from rooflint.engine.measuring import WORKER_BOOT, worker_env
        child = subprocess.Popen([sys.executable, "-c", WORKER_BOOT], env=worker_env(None))
        print(child.pid, flush=True)
        time.sleep(600)
        """
    )
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    outer = subprocess.Popen(
        [sys.executable, "-c", starter], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    worker = 0
    try:
        worker = int(outer.stdout.readline())
        outer.send_signal(signal.SIGKILL)
        outer.wait()
        assert wait_gone(worker, 60), "the measuring process outlived its starter"
    finally:
        if worker and alive(worker):
            os.kill(worker, signal.SIGKILL)
        outer.stdin.close()
        outer.stdout.close()


def test_a_model_set_worker_ends_when_its_parent_is_gone():
    """models/isolation.py's spawned set worker (a daemon: ended only by its parent's normal exit)
    watches the parent it is given; here one it no longer has, so it ends before its set is timed."""
    code = textwrap.dedent(
        """
        import os, time
        from rooflint.models import isolation

        class Pipe:
            def send(self, result):
                print("measured", result.status)

            def close(self):
                pass

        def measure_for_a_while(*_args):
            time.sleep(30)
            raise RuntimeError("timed on, orphaned")

        isolation._measure_alone = measure_for_a_while
        isolation._worker(Pipe(), "eager", None, None, os.getppid() + 1_000_000)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == ORPHANED_EXIT and "measured" not in done.stdout, done.stdout + done.stderr
