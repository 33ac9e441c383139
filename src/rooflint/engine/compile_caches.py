"""How many entries the on-disk compile caches hold: nvcc's build cache, Triton's and Inductor's.

An entry added while a variant made its first calls is a compile (or an nvcc build) that missed its
cache; none added means it was served from the cache. Counting files is cheap (one directory listing
each) and needs no hook inside torch, Triton or the build, whose cache layouts are read, never written.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from pathlib import Path

from rooflint.core.paths import cache_dir

CACHES = ("build", "triton", "inductor")


def inductor_dir() -> Path:
    """Inductor's cache root as torch._inductor computes it, without creating it as torch does."""
    explicit = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    try:
        user = getpass.getuser()
    except (KeyError, OSError, ModuleNotFoundError):
        user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    return Path(tempfile.gettempdir()) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def triton_own_dir() -> Path:
    """The folder Triton caches compiled kernels in when TRITON_CACHE_DIR is unset, as triton.knobs
    computes it ($TRITON_HOME or the home folder, then .triton/cache), without importing Triton."""
    return Path(os.environ.get("TRITON_HOME") or Path.home()) / ".triton" / "cache"


# What pin_triton_cache_dir set, so that a fleet worker started from a pinned process can tell the
# pin from a folder the user chose, and put Triton's cache under rooflint's root (fleet/task.py).
PINNED_MARK = "ROOFLINT_PINNED_TRITON_CACHE_DIR"


def pin_triton_cache_dir() -> None:
    """Set TRITON_CACHE_DIR, where it is unset, to Triton's own folder, for this process and the
    processes it starts.

    Triton reads the variable at every compile, and Inductor sets it to a folder of its own the first
    time a torch.compile variant builds a kernel in a process. So a family's @triton.jit kernel
    compiled after a torch.compile variant went to Inductor's folder, and in the next run's process,
    where it came before any torch.compile, it was looked for in Triton's folder, missed and compiled
    again: the Gluon attention's 15 s of first calls in a run with every cache warm. Pinned before
    anything compiles, every kernel of every process keys into one folder.
    """
    if not os.environ.get("TRITON_CACHE_DIR"):
        os.environ["TRITON_CACHE_DIR"] = os.environ[PINNED_MARK] = str(triton_own_dir())


def chosen_by_user(variable: str) -> bool:
    """Whether ``variable`` (a compiler's cache folder) was set, and not by pin_triton_cache_dir."""
    value = os.environ.get(variable)
    return bool(value) and not (variable == "TRITON_CACHE_DIR" and value == os.environ.get(PINNED_MARK))


def triton_dirs() -> list[Path]:
    """Triton's own cache (kernels a family's @triton.jit compiles) and the one Inductor points it at."""
    own = os.environ.get("TRITON_CACHE_DIR") or str(triton_own_dir())
    found = [Path(own)]
    inductor_triton = inductor_dir() / "triton"
    if inductor_triton.is_dir():
        found += [entry for entry in inductor_triton.iterdir() if entry.is_dir()]
    return found


def _entries(folder: Path) -> int:
    try:
        return sum(1 for _ in os.scandir(folder))
    except OSError:  # not there yet: nothing cached
        return 0


def _files_under(folder: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(folder))


def census() -> dict[str, int]:
    """Entries in each cache now: built libraries, Triton kernels, Inductor's compiled graphs."""
    return {
        "build": sum(1 for _ in cache_dir("cuda").glob("*.so")) if cache_dir("cuda").is_dir() else 0,
        "triton": sum(_entries(folder) for folder in triton_dirs()),
        "inductor": _files_under(inductor_dir() / "fxgraph"),
    }


def added(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Entries each cache gained between two censuses (another process clearing one is not a gain)."""
    return {name: max(0, after.get(name, 0) - before.get(name, 0)) for name in CACHES}
