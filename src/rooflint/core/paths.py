"""Where rooflint reads and writes: output directories, text outputs and the user cache."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from rooflint.core.errors import UserError


def cache_dir(kind: str) -> Path:
    """``$ROOFLINT_CACHE/<kind>``, else ``$XDG_CACHE_HOME/rooflint/<kind>``, else ``~/.cache/rooflint/<kind>``.

    One root for every cache (``cuda`` builds, measured ``ceilings``, float64 ``references``), so one
    variable moves them all.
    """
    root = os.environ.get("ROOFLINT_CACHE")
    if root:
        return Path(root) / kind
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rooflint" / kind


def existing_file(path: Path | str, what: str = "file", example: str = "") -> Path:
    """``path`` as a Path if it names a file, else one line saying what it is instead (``example``:
    the file a folder given by mistake usually holds, e.g. results.csv)."""
    path = Path(path)
    if path.is_dir():
        hint = f" (e.g. {path / example})" if example else ""
        raise UserError(f"{what} {path} is a directory; give a file in it{hint}")
    if not path.exists():
        raise UserError(f"{what} {path} does not exist")
    return path


def why_not(path: Path | str, error: OSError) -> str:
    """Why ``path`` could not be written, in words: where a folder on its way is a file (mkdir says
    "File exists", open says "Not a directory"), name that file, so the answer is not read as "the
    output already exists"."""
    for folder in Path(path).parents:
        if folder.exists():
            if not folder.is_dir():
                return f"{folder} is a file, not a folder"
            break
    return error.strerror or str(error)


def output_dir(path: Path) -> Path:
    """Create an output directory and prove it is writable, or fail with one line."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        # A probe of its own (a unique name): two rooflint processes proving the same folder at once
        # must not delete each other's.
        with tempfile.NamedTemporaryFile(dir=path, prefix=".rooflint-write-test-"):
            pass
    except OSError as error:
        raise UserError(f"cannot write to output directory {path}: {why_not(path / 'probe', error)}") from None
    return path


def probe_output_dir(path: Path) -> None:
    """Prove ``path`` can be an output directory, as output_dir does, without creating it: a flag
    refused after this check must not leave an empty folder. An existing folder gets output_dir's
    probe file; a missing one is judged by the nearest folder above it that exists. Nothing is
    created and removed: two processes probing the same missing folder at once (two commands, two
    test workers) each removed the folder under the other's probe file."""
    path = Path(path)
    if path.exists():
        output_dir(path)
        return
    if path.is_symlink():  # mkdir cannot create it: refused here, not as "File exists" after the run's work
        raise UserError(
            f"cannot write to output directory {path}: it is a symbolic link to {os.readlink(path)}, which does "
            "not exist; create that folder or give another one"
        )
    _writable_above(path, f"cannot write to output directory {path}")


def probe_writable_file(path: Path | str, what: str = "file") -> None:
    """writable_file without creating the folders on its way, as probe_output_dir: input refused after
    this check (a bad --format, a results file without rows) must not leave an empty one."""
    path = Path(path)
    if path.parent.exists():
        writable_file(path, what)
        return
    _writable_above(path, f"cannot write {what} {path}")


def _writable_above(path: Path, refusal: str) -> None:
    """One line (``refusal``: why) where the nearest existing folder above ``path`` is a file or not
    writable: creating the folders down to ``path`` would fail there."""
    for folder in path.parents:
        if folder.exists():
            if not folder.is_dir():
                raise UserError(f"{refusal}: {folder} is a file, not a folder")
            if not os.access(folder, os.W_OK | os.X_OK):
                raise UserError(f"{refusal}: {folder} is not writable")
            return


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: by two spellings (./x.csv, a symlink), or by two names (a
    hard link). A file not written yet is judged by its spelling alone."""
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except OSError:
        return False


@contextlib.contextmanager
def replacing(path: Path | str, newline: str | None = None, binary: bool = False) -> Iterator[IO]:
    """A file to write ``path`` through (text, or bytes with ``binary``): a private name beside it,
    renamed over ``path`` once written whole. Stopped midway (Ctrl-C, SIGTERM, an error), ``path``
    keeps what it held before and the partial file is removed: written in place, a cut-short results
    file or report kept the rows written so far and read back as a complete, shorter one. A
    symlink's target is the file replaced; what is not a regular file (/dev/stdout, a pipe) is
    written as it is."""
    path = Path(path)
    mode = "wb" if binary else "w"
    if path.exists() and not path.is_file():
        with path.open(mode, newline=newline) as handle:
            yield handle
        return
    path = Path(os.path.realpath(path))
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temporary.open(mode, newline=newline) as handle:
            yield handle
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str, what: str = "file") -> None:
    """Write a text output, creating its directory, or fail with one line naming it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(path) as handle:
            handle.write(text)
    except OSError as error:
        raise UserError(f"cannot write {what} {path}: {why_not(path, error)}") from None


def writable_file(path: Path | str, what: str = "file") -> Path:
    """Prove ``path`` can be written (its folder created, the file opened for writing) before any
    work whose result goes there, or fail with one line naming it. An existing file is left as is."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"cannot write {what} {path}: it is a directory; give a file name")
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a"):
            pass
    except OSError as error:
        raise UserError(f"cannot write {what} {path}: {why_not(path, error)}") from None
    if not existed:
        # The file the open created: a dangling symlink's target, not the link (unlinked, the user's
        # link was gone and an empty file was left where it pointed).
        Path(os.path.realpath(path)).unlink(missing_ok=True)
    return path
