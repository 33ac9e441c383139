"""Where an ab entry's family module comes from: the installed package, a git ref, or a file.

A ref's copy and a file's copy are imported beside the installed family, in the same process and
under module names of their own, so that their entries alternate with the others round by round.

- A git ref: ``git archive`` exports the package that holds the family (``rooflint.kernels`` for a
  built-in) at that commit into a temporary folder, and every ``rooflint.kernels`` in the copy's
  text is renamed to the copy's own name, so the copy imports its own helpers and finds its own
  ``.cu`` files beside it. It still imports the installed ``rooflint.core`` and ``rooflint.engine``:
  a ref whose families need another core fails to import, and says so.
- A file: one family module (a copy of ``kernels/softmax/__init__.py``, say), imported as a module
  inside the family's package, so its relative imports resolve as the original's do.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from rooflint.core.errors import UserError, describe_import
from rooflint.core.family import Family
from rooflint.core.registry import get_family, sources

ON_INSTALLED_CORE = "a ref's kernels run on the installed rooflint core and engine"
WORKTREE = "worktree"  # --ref worktree: the installed package as it is (an editable install: your edits)


@dataclass(frozen=True)
class FamilySource:
    """A family as loaded from one place; ``label`` tags its entries (empty: the installed one)."""

    label: str
    family: Family


def installed(name: str, label: str = "") -> FamilySource:
    return FamilySource(label, get_family(name))


def _family_module(name: str) -> ModuleType:
    get_family(name)  # a UserError for an unknown family, listing the known ones
    return importlib.import_module(sources()[name].module)


def _family_of(module: ModuleType, name: str, where: str) -> Family:
    family = getattr(module, "FAMILY", None)
    if not isinstance(family, Family) or family.name != name:
        raise UserError(f"{where} defines no FAMILY named {name!r}")
    return family


def _git(directory: Path, *arguments: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(directory), *arguments], capture_output=True, check=False)
    except FileNotFoundError:
        raise UserError("--ref needs git, which is not on PATH") from None


def _export(container: Path, ref: str, into: Path) -> Path:
    """The folder ``container`` as it was at ``ref``, extracted under ``into``; returns its copy."""
    top = _git(container, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise UserError(f"--ref {ref}: {container} is not inside a git checkout (install rooflint from one)")
    root = Path(top.stdout.decode().strip())
    commit = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if commit.returncode != 0:
        raise UserError(f"unknown git ref {ref!r} in {root}; give a commit, branch or tag (e.g. HEAD~1)")
    relative = container.resolve().relative_to(root.resolve()).as_posix()
    archive = _git(root, "archive", "--format=tar", commit.stdout.decode().strip(), "--", relative)
    if archive.returncode != 0:
        raise UserError(f"--ref {ref}: git archive of {relative} failed: {archive.stderr.decode().strip()[:200]}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        # The "data" filter (no links out of the folder, no device files) where this Python has it.
        tar.extractall(into, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return into / relative


def _import_package(name: str, folder: Path) -> ModuleType:
    init = folder / "__init__.py"
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def at_ref(name: str, ref: str, workdir: Path, index: int) -> FamilySource:
    """Family ``name`` as committed at ``ref`` (``worktree``: the installed one), exported under
    ``workdir`` and imported as ``rooflint_ab_ref<index>``."""
    if ref == WORKTREE:
        return installed(name, WORKTREE)
    module = _family_module(name)
    container_name = module.__name__.rpartition(".")[0]
    if not container_name:
        raise UserError(f"--ref needs family {name} inside a package; its module {module.__name__} is top-level")
    container = Path(sys.modules[container_name].__file__).parent
    copy = _export(container, ref, workdir / f"ref{index}")
    alias = f"rooflint_ab_ref{index}"
    own_name = re.compile(rf"\b{re.escape(container_name)}\b")
    for path in copy.rglob("*.py"):
        path.write_text(own_name.sub(alias, path.read_text()))
    tail = module.__name__[len(container_name) + 1 :]
    try:
        _import_package(alias, copy)
        copied = importlib.import_module(f"{alias}.{tail}")
    except ModuleNotFoundError as error:
        if error.name and error.name.startswith(f"{alias}.{tail}"):
            raise UserError(f"family {name} does not exist at {ref}") from None
        raise UserError(f"{name} at {ref} failed to import ({ON_INSTALLED_CORE}): {error}") from None
    except (Exception, SystemExit) as error:  # the ref's own code, against today's core: name it, no traceback
        raise UserError(f"{name} at {ref} failed to import ({ON_INSTALLED_CORE}): {describe_import(error)}") from None
    return FamilySource(ref, _family_of(copied, name, f"{name} at {ref}"))


def from_file(name: str, path: Path, index: int) -> FamilySource:
    """Family ``name`` from the module file ``path``, imported inside the family's package."""
    if not path.is_file() or path.suffix != ".py":
        raise UserError(f"--source {path}: not a readable .py file (give a copy of {name}'s family module)")
    try:
        path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"--source {path} cannot be read: {error}") from None
    module = _family_module(name)
    package = module.__name__ if hasattr(module, "__path__") else module.__name__.rpartition(".")[0]
    alias = f"{package}._ab_source{index}" if package else f"_rooflint_ab_source{index}"
    spec = importlib.util.spec_from_file_location(alias, path)
    copied = importlib.util.module_from_spec(spec)
    sys.modules[alias] = copied  # a dataclass in the module looks its module up here
    try:
        spec.loader.exec_module(copied)
    except (Exception, SystemExit) as error:  # the file's own code: name it, no traceback
        raise UserError(f"--source {path} failed to import: {describe_import(error)}") from None
    return FamilySource(path.name, _family_of(copied, name, f"--source {path}"))
