"""Honest timing: warm up, flush L2 before every call, time each call with CUDA events.

Each sample is one call bracketed by its own pair of events, with a write of a buffer twice the
size of L2 just before it, so no input is still cache-resident from the previous call and the
kernel is measured against DRAM, which is what the roofline's bandwidth ceiling describes.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

WARMUP_MS = 25.0  # long enough for module load, autotuning replays and clock ramp-up
REP_MS = 200.0  # timed budget per variant
MIN_SAMPLES = 10
MAX_SAMPLES = 2000
MIN_FLUSH_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    n_samples: int
    mode: str  # cuda_events | cuda_graph | cpu_wall
    l2_flushed: bool


def summarize(samples_ms: list[float], mode: str, l2_flushed: bool) -> Timing:
    ordered = sorted(samples_ms)
    return Timing(
        median_ms=statistics.median(ordered),
        p20_ms=_quantile(ordered, 0.2),
        p80_ms=_quantile(ordered, 0.8),
        n_samples=len(ordered),
        mode=mode,
        l2_flushed=l2_flushed,
    )


def _quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on a sorted list."""
    if len(ordered) == 1:
        return ordered[0]
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@contextlib.contextmanager
def nvtx_range(name: str):
    """Nested NVTX ranges, one per '/'-separated part of ``name`` (family/variant/dtype/size).

    ncu's --nvtx-include reads each '/' of a filter as one level of nesting, so a single range
    named "softmax/triton/bf16/large" would never match "softmax/triton/bf16/large/"; nested
    ranges do. Uses the nvtx package, else torch.cuda.nvtx; a no-op without CUDA.
    """
    parts = [part for part in name.split("/") if part]
    try:
        import nvtx

        push, pop = nvtx.push_range, nvtx.pop_range
    except ImportError:
        if not torch.cuda.is_available():
            yield
            return
        push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    for part in parts:
        push(part)
    try:
        yield
    finally:
        for _ in parts:
            pop()


_flush_buffers: dict[int, torch.Tensor] = {}


def flush_buffer(l2_bytes: int) -> torch.Tensor:
    size = max(2 * l2_bytes, MIN_FLUSH_BYTES)
    if size not in _flush_buffers:
        _flush_buffers.clear()
        _flush_buffers[size] = torch.empty(size // 4, dtype=torch.int32, device="cuda")
    return _flush_buffers[size]


_cycles_per_us: float | None = None


def spin_cycles_per_us() -> float:
    """Calibrate torch.cuda._sleep: how many of its cycles make a microsecond on this GPU."""
    global _cycles_per_us
    if _cycles_per_us is None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)  # warm the spin kernel
        start.record()
        torch.cuda._sleep(1_000_000)
        end.record()
        torch.cuda.synchronize()
        _cycles_per_us = 1_000_000 / max(start.elapsed_time(end) * 1e3, 1.0)
    return _cycles_per_us


def time_cuda(
    fn: Callable[[], Any],
    *,
    l2_bytes: int,
    nvtx_name: str = "",
    warmup_ms: float = WARMUP_MS,
    rep_ms: float = REP_MS,
) -> Timing:
    """Device time of one call, flushed: median, p20, p80 over many samples.

    Before each sample the GPU is given a spin kernel that lasts longer than Python takes to
    enqueue the call, so the start event fires only once the whole call is queued behind it. The
    time is then what the GPU spends on the call, not how fast the host launched it: without the
    spin, any call whose Python launch takes longer than the flush kernel runs would have the
    host's latency timed as its own. Launch overhead is measured separately (--cuda-graphs).
    """
    flush = flush_buffer(l2_bytes)
    fn()
    torch.cuda.synchronize()
    host_s = []
    for _ in range(5):
        began = time.perf_counter()
        fn()
        host_s.append(time.perf_counter() - began)
    torch.cuda.synchronize()
    # Estimate one flushed call to size warm-up and repetitions.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush.fill_(1)
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate_ms = max(start.elapsed_time(end) / 5, 1e-3)
    for _ in range(max(1, int(warmup_ms / estimate_ms))):
        fn()
    # Twice the slowest host enqueue seen, plus margin for the event record itself.
    spin = int(spin_cycles_per_us() * (2 * max(host_s) * 1e6 + 20))
    n = int(min(MAX_SAMPLES, max(MIN_SAMPLES, rep_ms / estimate_ms)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    with nvtx_range(nvtx_name) if nvtx_name else contextlib.nullcontext():
        for i in range(n):
            flush.fill_(i)  # a write, so L2 holds the flush buffer's lines and none of the inputs
            torch.cuda._sleep(spin)
            starts[i].record()
            fn()
            ends[i].record()
    torch.cuda.synchronize()
    return summarize([s.elapsed_time(e) for s, e in zip(starts, ends)], "cuda_events", True)


def time_cpu(fn: Callable[[], Any], *, warmup_ms: float = WARMUP_MS, rep_ms: float = REP_MS) -> Timing:
    """Wall-clock timing with the same statistics; CPU caches are not flushed (recorded as such)."""
    fn()
    started = time.perf_counter()
    fn()
    estimate_ms = max((time.perf_counter() - started) * 1e3, 1e-3)
    deadline = time.perf_counter() + warmup_ms / 1e3
    while time.perf_counter() < deadline:
        fn()
    n = int(min(MAX_SAMPLES, max(MIN_SAMPLES, rep_ms / estimate_ms)))
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return summarize(samples, "cpu_wall", False)
