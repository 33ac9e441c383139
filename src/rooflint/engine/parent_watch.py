"""A measuring process ends when the process that started it does.

Its jobs come on stdin, read only between tasks, so a child whose parent was killed mid-task (a Dask
worker closed under Ctrl-C, a bench sent SIGKILL) would otherwise go on building or timing on the GPU,
orphaned, until its task ended, and skew whatever measures on that GPU next.
"""

from __future__ import annotations

import os
import threading
import time

PARENT_PID_VARIABLE = "ROOFLINT_PARENT_PID"  # set by the starter (engine/measuring.py)
POLL_S = 0.5  # one getppid() call a poll: nothing the timed kernels can notice
ORPHANED_EXIT = 1


def watched_parent(variable: str = PARENT_PID_VARIABLE) -> int:
    """The pid this process must outlive no longer than: the one its starter wrote in ``variable``
    (it may already be gone by the time this process has imported torch), else the current parent."""
    try:
        return int(os.environ[variable])
    except (KeyError, ValueError):
        return os.getppid()


def end_with_parent(parent: int, poll_s: float = POLL_S) -> threading.Thread:
    """Start a daemon thread that ends this process at once when its parent is no longer ``parent``
    (an orphan is adopted by init or a subreaper, so its parent id changes)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(ORPHANED_EXIT)  # no cleanup: nobody reads this process's output any more

    thread = threading.Thread(target=watch, name="rooflint-parent-watch", daemon=True)
    thread.start()
    return thread
