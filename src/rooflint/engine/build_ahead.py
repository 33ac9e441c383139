"""Build every CUDA library a bench will load before its rows need them, several at once.

A variant builds its .cu source with nvcc on its first call (engine/cuda_build.load); one after
another, a cold `bench all` would wait for fifteen builds in turn, and the GPU idles through each.
Here bench starts them all at once, before the measuring process has even imported torch, in a
pool of threads: each thread only waits on its nvcc subprocess, so the builds run side by side on
the host's cores. A variant's own ``load`` then finds its library built, or waits for that one
build only (cuda_build.build's lock), and loads exactly what it would have built: the same source,
flags, arch and cache path, because both go through ``cuda_build.build``.

Which sources: those the selected variants declare when they register
(``@FAMILY.variant(..., sources=(cuda_build.family_source(__file__, "softmax"),))``, Variant.sources),
the same paths their builders pass to ``cuda_build.load``; a test holds every rooflint variant's
declaration to what its builder's code loads. A variant that declares none (a plugin's written before
the field existed) builds its library on first use, as before. Where there is no nvcc, no CUDA device
or no NVML to read the GPU's arch, nothing starts.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from rooflint.core.registry import get_family
from rooflint.engine import cuda_build


def sources_for(pairs: Iterable[tuple[str, str]]) -> list[Path]:
    """The .cu sources the variants ``(family, variant)`` declare, in first-seen order. A declared
    file that is not there is left to the variant's own load, which says so in its row."""
    found: dict[Path, None] = {}
    for family_name, variant_name in dict.fromkeys(pairs):
        for source in get_family(family_name).variants[variant_name].sources:
            if source.is_file():
                found.setdefault(source, None)
    return list(found)


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
