"""Ending a rooflint process without Python's teardown of every module it imported."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

# The status Python ends with when it cannot flush stdout or stderr at exit (a closed pipe).
FLUSH_FAILED = 120


def exit_now(code: object = None) -> NoReturn:
    """End this process as ``sys.exit(code)`` would, less the teardown of its modules.

    At exit Python frees each object one by one and runs its cycle collector over them all: once
    torch, Triton and transformers are imported that is over half a second of CPU, paid by every
    command and again by the bench's measuring process, whose end the bench waits for. Here the
    atexit handlers run and stdout and stderr are flushed, as at a normal exit, then the OS takes
    back the rest. Where a thread that is not a daemon is still running, Python's exit would wait for
    it first: then (and off the main thread) this is sys.exit, unchanged.
    """
    main = threading.main_thread()
    if threading.current_thread() is not main or any(
        thread is not main and thread.is_alive() and not thread.daemon for thread in threading.enumerate()
    ):
        sys.exit(code)
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # as Python does for a message given to sys.exit
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            status = FLUSH_FAILED
    os._exit(status & 0xFF)
