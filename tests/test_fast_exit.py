"""rooflint.core.fast_exit.exit_now ends a process as sys.exit does (atexit handlers, flushed output,
the same status, threads that are not daemons joined) without Python's teardown of its modules."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(body: str) -> subprocess.CompletedProcess:
    script = "import atexit, sys, threading, time\nfrom rooflint.core.fast_exit import exit_now\n" + body
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(("code", "status"), [("None", 0), ("0", 0), ("2", 2), ("130", 130), ("True", 1)])
def test_the_status_is_sys_exits_and_atexit_and_buffered_output_are_kept(code, status):
    done = _run(f"atexit.register(print, 'handler ran')\nsys.stdout.write('unflushed ')\nexit_now({code})\n")
    assert done.returncode == status, done.stderr
    assert done.stdout == "unflushed handler ran\n" and done.stderr == ""


def test_a_message_is_printed_and_ends_with_status_1_as_sys_exit_does():
    done = _run("exit_now('error: said here')\n")
    assert (done.returncode, done.stderr) == (1, "error: said here\n")


def test_a_thread_that_is_not_a_daemon_is_joined_first():
    done = _run(
        "def late():\n    time.sleep(0.3)\n    print('thread finished', flush=True)\n"
        "threading.Thread(target=late).start()\nexit_now(3)\n"
    )
    assert (done.returncode, done.stdout) == (3, "thread finished\n"), done.stderr
