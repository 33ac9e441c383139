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
    text = _read(lock)
    return None if text is None else _owner(text, lock)


def _read(lock: Path) -> str | None:
    try:
        return lock.read_text()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise UserError(f"cannot read {lock}: {error.strerror or error}") from None


def _owner(text: str, lock: Path) -> dict | None:
    """The live holder a lock's text names, or None where that holder died on this host."""
    try:
        owner = json.loads(text)
        pid, host = int(owner["pid"]), str(owner["host"])
    except (ValueError, KeyError, TypeError):
        # Garbage (a lock is linked into place whole, never half-written): never silently shared.
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
        self.text = ""

    def __enter__(self) -> FolderLock:
        refuse_if_busy(self.folder)
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv),
        }
        # Written whole to a private name, then linked into place: link fails where a lock is there
        # (another bench's, or a dead one's to clear first), and nobody reads a half-written lock.
        scratch = self.folder / f"{LOCK_NAME}.{os.getpid()}"
        try:
            self.text = json.dumps(record)
            scratch.write_text(self.text)
            for _ in range(3):
                try:
                    os.link(scratch, self.path)
                    break
                except FileExistsError:
                    seen = _read(self.path)
                    if seen is not None and not self.clear_stale(seen):
                        refuse_if_busy(self.folder)
            else:
                raise UserError(f"--out {self.folder} was taken by another bench as this one started")
        except OSError as error:
            raise UserError(f"cannot lock output directory {self.folder}: {error.strerror or error}") from None
        finally:
            scratch.unlink(missing_ok=True)
        self.held = True
        return self

    def clear_stale(self, seen: str) -> bool:
        """Remove the lock whose text was ``seen`` if its holder is dead; False where it is live.

        Two benches may both find one dead lock: the first clears it and links its own, and the
        second must not then delete that fresh lock. So the lock is moved aside (atomic) and checked
        to be the one judged dead; a different one is put back."""
        if _owner(seen, self.path) is not None:
            return False
        aside = self.folder / f"{LOCK_NAME}.stale.{os.getpid()}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return True  # cleared by the other bench meanwhile
        if aside.read_text() == seen:
            aside.unlink()
            return True
        try:  # another bench's fresh lock: back where it was
            os.link(aside, self.path)
        except FileExistsError:
            pass  # a third lock is in place meanwhile; the moved one's holder will find it gone
        aside.unlink()
        return False

    def __exit__(self, *exc) -> None:
        if self.held:
            try:
                ours = _read(self.path) == self.text  # never another bench's, were ours ever lost
            except UserError:
                ours = False
            if ours:
                self.path.unlink(missing_ok=True)
            self.held = False
