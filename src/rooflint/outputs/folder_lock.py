"""One bench writes an output folder at a time.

Two benches appending to one results.csv interleave their rows (a line of one run inside a line of
the other), and both would print "wrote results.csv". A bench holds ``.rooflint.lock`` in its
folder while it runs: the file names its process, host and start, so a second bench is refused
with one line naming the first. A lock left by a process that died (SIGKILL, a power cut) on this
host is stale, and taken over; one from another host sharing the folder cannot be checked, so the
message says how to remove it.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
from pathlib import Path

from rooflint.core.errors import UserError

LOCK_NAME = ".rooflint.lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def holder(folder: Path) -> dict | None:
    """Who holds ``folder``'s lock, or None where it is free or its holder died on this host."""
    lock = Path(folder) / LOCK_NAME
    try:
        text = lock.read_text()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise UserError(f"cannot read {lock}: {error.strerror or error}") from None
    try:
        owner = json.loads(text)
        pid, host = int(owner["pid"]), str(owner["host"])
    except (ValueError, KeyError, TypeError):
        # Written by a bench that is starting this instant, or garbage: never silently shared.
        return {"pid": "?", "host": "?", "started": "?", "lock": str(lock)}
    if host == socket.gethostname() and (pid == os.getpid() or not _alive(pid)):
        return None
    return {**owner, "lock": str(lock)}


def refuse_if_busy(folder: Path) -> None:
    """One line naming the bench that holds ``folder``, if one does."""
    owner = holder(folder)
    if owner is not None:
        raise UserError(
            f"--out {folder} is in use by another bench (pid {owner.get('pid')} on {owner.get('host')}, "
            f"started {owner.get('started')}); wait for it or pick another --out "
            f"(if that run is gone, delete {owner['lock']})"
        )


class FolderLock:
    """Held while a bench writes ``folder``: ``with FolderLock(out): ...``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.held = False

    def __enter__(self) -> FolderLock:
        refuse_if_busy(self.folder)
        self.path.unlink(missing_ok=True)  # free or stale: a dead holder's lock goes
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv),
        }
        # Written whole to a private name, then linked into place: link fails where another bench
        # took the lock in between, and nobody ever reads a half-written lock.
        scratch = self.folder / f"{LOCK_NAME}.{os.getpid()}"
        try:
            scratch.write_text(json.dumps(record))
            os.link(scratch, self.path)
        except FileExistsError:
            refuse_if_busy(self.folder)
            raise UserError(f"--out {self.folder} was taken by another bench as this one started") from None
        except OSError as error:
            raise UserError(f"cannot lock output directory {self.folder}: {error.strerror or error}") from None
        finally:
            scratch.unlink(missing_ok=True)
        self.held = True
        return self

    def __exit__(self, *exc) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False
