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


def triton_dirs() -> list[Path]:
    """Triton's own cache (kernels a family's @triton.jit compiles) and the one Inductor points it at."""
    own = os.environ.get("TRITON_CACHE_DIR") or str(Path.home() / ".triton" / "cache")
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
