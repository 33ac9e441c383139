"""torch.profiler sessions without Kineto's USDT lines on the user's terminal.

Kineto (pytorch/kineto#1325, in torch 2.13's build) logs ``profiler_start`` and ``profiler_stop`` at
its USDT level for tools that trace its logger, and its default sink prints them to stderr as well:
``USDT:2026-... SyncActivityProfilerHandler.cpp:52] profiler_start``, two lines a session, between
rooflint's tables. KINETO_LOG_LEVEL=6 hides them, but USDT is Kineto's highest level, above ERROR,
so that would hide its errors too (why a profile came back without kernels, say). The lines are
dropped from file descriptor 2 instead: for the session it writes to a file, and all but the USDT
lines go back to the real stderr when the session ends, in their order.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

USDT_PREFIX = b"USDT:"


def _flush_stderr() -> None:
    if sys.stderr is not None:
        with contextlib.suppress(OSError, ValueError):  # closed or detached: nothing of ours is pending
            sys.stderr.flush()


@contextlib.contextmanager
def without_usdt_lines() -> Iterator[None]:
    """Run the body (a ``with torch.profiler.profile(...)`` block) with Kineto's USDT lines dropped
    from stderr; anything else written there meanwhile (Python's or C++'s) still reaches it."""
    _flush_stderr()
    try:
        real = os.dup(2)
    except OSError:  # no stderr to filter (closed): the profiler runs as it would have
        real = None
    if real is None:
        yield
        return
    with tempfile.TemporaryFile() as caught:  # a file, not a pipe: a long session cannot fill it and block
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            _flush_stderr()  # Python's buffered writes from the body belong to the caught part
            os.dup2(real, 2)
            os.close(real)
            caught.seek(0)
            kept = b"".join(line for line in caught if not line.startswith(USDT_PREFIX))
            if kept:
                with open(2, "wb", closefd=False) as stderr:
                    stderr.write(kept)
