"""Build every CUDA library a bench will load before its rows need them, several at once.

A variant builds its .cu source with nvcc on its first call (engine/cuda_build.load); one after
another, a cold `bench all` would wait for fifteen builds in turn, and the GPU idles through each.
Here bench starts them all at once, before the measuring process has even imported torch, in a
pool of threads: each thread only waits on its nvcc subprocess, so the builds run side by side on
the host's cores. A variant's own ``load`` then finds its library built, or waits for that one
build only (cuda_build.build's lock), and loads exactly what it would have built: the same source,
flags, arch and cache path, because both go through ``cuda_build.build``.

Which sources: those a selected variant's builder can reach, read from its source code: every
``family_source(<module>.__file__, "name")`` in the builder, and in the functions and classes of
rooflint (or of the variant's own package) it names, followed through the modules they live in. A
library named any other way (a path computed at run time) is not found here and builds on first use,
as before. Where there is no nvcc, no CUDA device or no NVML to read the GPU's arch, nothing starts.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import sys
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

from rooflint.core.registry import get_family
from rooflint.engine import cuda_build


def sources_for(pairs: Iterable[tuple[str, str]]) -> list[Path]:
    """The .cu sources the variants ``(family, variant)`` load, in first-seen order."""
    found: dict[Path, None] = {}
    seen: set[tuple[str, str]] = set()
    for family_name, variant_name in dict.fromkeys(pairs):
        builder = get_family(family_name).variants[variant_name].build
        module = sys.modules.get(getattr(builder, "__module__", ""))
        if module is None:
            continue
        for source in _reached(module, builder.__name__, seen, _package(module)):
            found.setdefault(source, None)
    return list(found)


def _package(module: ModuleType) -> tuple[str, ...]:
    """The top-level packages whose code is followed: rooflint's and the variant's own (a plugin's)."""
    return tuple(dict.fromkeys(("rooflint", module.__name__.split(".")[0])))


def _reached(module: ModuleType, name: str, seen: set[tuple[str, str]], packages: tuple[str, ...]) -> list[Path]:
    """Sources named in the top-level def or class ``name`` of ``module`` and in what it names."""
    if (module.__name__, name) in seen:
        return []
    seen.add((module.__name__, name))
    node = _definitions(module).get(name)
    if node is None:
        return []
    sources: list[Path] = []
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        source = _family_source(module, call)
        if source is not None and source.is_file():
            sources.append(source)
    for target in _named(module, node, packages):
        owner = sys.modules.get(getattr(target, "__module__", "") or "")
        own_name = getattr(target, "__name__", "")
        if owner is not None and own_name and owner.__name__.split(".")[0] in packages:
            sources += _reached(owner, own_name, seen, packages)
    return sources


_parsed: dict[str, dict[str, ast.AST]] = {}


def _definitions(module: ModuleType) -> dict[str, ast.AST]:
    """The module's top-level functions and classes by name, parsed once."""
    if module.__name__ not in _parsed:
        try:
            tree = ast.parse(inspect.getsource(module))
        except (OSError, TypeError, SyntaxError):
            tree = ast.Module(body=[], type_ignores=[])
        kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        _parsed[module.__name__] = {n.name: n for n in tree.body if isinstance(n, kinds)}
    return _parsed[module.__name__]


def _named(module: ModuleType, node: ast.AST, packages: tuple[str, ...]) -> list[Any]:
    """The functions and classes ``node`` names: ``f`` and ``other_module.f``, as the module binds
    them or as an import inside ``node`` does (a module imported on first use)."""
    bound = {**vars(module), **_local_imports(node, packages)}
    names: list[Any] = []
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            value = bound.get(child.id)
        elif isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name):
            value = getattr(bound.get(child.value.id), child.attr, None)
        else:
            continue
        if inspect.isfunction(value) or inspect.isclass(value):
            names.append(value)
    return names


def _local_imports(node: ast.AST, packages: tuple[str, ...]) -> dict[str, Any]:
    """``from package.module import name`` statements inside ``node``, of the followed packages."""
    bound: dict[str, Any] = {}
    for child in ast.walk(node):
        if not isinstance(child, ast.ImportFrom) or child.level or not child.module:
            continue
        if child.module.split(".")[0] not in packages:
            continue
        for alias in child.names:
            bound[alias.asname or alias.name] = _imported(child.module, alias.name)
    return bound


def _imported(module_name: str, name: str) -> Any:
    """``from module_name import name``: a submodule, or a name the module defines; None where it
    cannot be imported here (its library then builds on first use)."""
    try:
        return importlib.import_module(f"{module_name}.{name}")
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - a submodule that fails to import
        return None
    try:
        return getattr(importlib.import_module(module_name), name, None)
    except Exception:  # noqa: BLE001
        return None


def _family_source(module: ModuleType, call: ast.Call) -> Path | None:
    """The path of a ``family_source(<file>, "name")`` call whose arguments are plain enough to read."""
    called = call.func
    called_name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
    if called_name != "family_source" or not call.args or len(call.args) > 2 or call.keywords:
        return None
    where = call.args[0]
    if isinstance(where, ast.Name) and where.id == "__file__":
        module_file = getattr(module, "__file__", None)
    elif isinstance(where, ast.Attribute) and where.attr == "__file__" and isinstance(where.value, ast.Name):
        module_file = getattr(vars(module).get(where.value.id), "__file__", None)
    else:
        return None
    name = None
    if len(call.args) == 2:
        if not (isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str)):
            return None
        name = call.args[1].value
    return cuda_build.family_source(module_file, name) if module_file else None


def gpu_archs(device_indices: Iterable[int | None]) -> list[str]:
    """The nvcc arch of each GPU a bench runs on, read through NVML: bench's own process keeps no
    CUDA context (its workers must find the GPU free of other processes). Empty without NVML."""
    try:
        import pynvml

        from rooflint.engine.nvml import NvmlDevice

        archs = []
        for index in dict.fromkeys(device_indices):
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(NvmlDevice.open(index).handle)
            archs.append(cuda_build.arch_name(major, minor))
        return list(dict.fromkeys(archs))
    except Exception:  # noqa: BLE001 - no NVML here: each variant builds on first use, as before
        return []


def pool_size(builds: int, cpus: int | None = None) -> int:
    """Threads for the builds: one nvcc keeps one core busy; at most half the cores, so the measuring
    process (one core launching kernels) and the rest of the host never wait for a core."""
    cpus = cpus or os.cpu_count() or 2
    return max(1, min(builds, cpus // 2))


class BuildsAhead:
    """The builds started at a bench's start: ``built`` libraries compiled, ``seconds`` from the
    first build's start to the last one's end (the builds' own wall time, beside the measuring)."""

    def __init__(self, sources: list[Path], archs: list[str], workers: int | None = None) -> None:
        jobs = [(source, arch) for arch in archs for source in sources]
        self.built = 0
        self.failed = 0
        self._began = time.perf_counter()
        self._ended = self._began
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(pool_size(len(jobs), workers), "rooflint-nvcc") if jobs else None
        self.futures: list[Future] = [self._pool.submit(self._build, *job) for job in jobs] if self._pool else []

    def _build(self, source: Path, arch: str) -> None:
        compiled, failed = False, False
        try:
            _, compiled = cuda_build.build(source, arch)
        except Exception:  # noqa: BLE001 - the variant's own load builds it again and reports why
            failed = True
        with self._lock:
            self.built += compiled
            self.failed += failed
            self._ended = time.perf_counter()

    @property
    def seconds(self) -> float:
        return self._ended - self._began if self.futures else 0.0

    def close(self, wait: bool = True) -> None:
        """Wait for the builds (an interrupted bench cancels those not yet started)."""
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=not wait)


def start(pairs: Iterable[tuple[str, str]], device: str, device_indices: Iterable[int | None]) -> BuildsAhead:
    """Start building what the variants ``(family, variant)`` will load on these GPUs; nothing on a
    CPU run or without nvcc."""
    if device != "cuda" or cuda_build.nvcc_path() is None:
        return BuildsAhead([], [])
    archs = gpu_archs(device_indices)
    try:
        sources = sources_for(pairs) if archs else []
    except Exception:  # noqa: BLE001 - a head start, never a reason for a bench to fail
        sources = []
    return BuildsAhead(sources, archs)
