"""CUDA-graph timing: the time per call once launch gaps are gone.

Timed one call at a time, a short kernel measures the host more than the GPU: each PyTorch op
spends a few microseconds in Python dispatch and cudaLaunchKernel, and when that exceeds the
kernel's run time the GPU idles between kernels and the events time the idle gaps too. A CUDA
graph submits N captured calls with one launch, so the replay runs the kernels back to back.
The same N calls launched back to back from Python, minus the graph's time, is the launch
overhead bench reports (bench's default event timing keeps the GPU busy while the host enqueues,
so it measures device time and leaves launch overhead to this comparison).

L2: the flush (timing.L2Flush: write, then read back, so no dirty lines remain) runs before each
replay, not between the N calls inside it (a flush inside the graph would be timed too, and
subtracting its time back out adds more noise than a short kernel takes). Calls 2..N of a
replay may find the previous call's lines in L2, so these rows say l2_flushed=False; for a
working set several times the L2, as at the large sizes, each call streams through more than
the L2 holds and little survives. `rooflint lint` warns on rows
whose working set fits in cache.

Regimes: in burst a spin precedes each replay (as in timing.time_cuda); in sustained the replays
run back to back after timing.heat_up, and the sampler reads clocks and energy over the replays.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch

from rooflint.engine import timing
from rooflint.engine.nvml import NullSampler, Sampler
from rooflint.engine.settings import Regime

TARGET_REPLAY_MS = 2.0  # one replay long enough that the event resolution (~0.5 us) is negligible
MAX_CALLS = 1000  # caps the graph's size (and capture time) for the shortest kernels
MIN_REPLAYS = 10
MAX_REPLAYS = 200
# Cycles for the GPU to spin before each timed replay, so the host has queued the whole graph
# before the start event fires and the graph's own launch latency is not timed (~0.25 ms at 2 GHz).
SPIN_CYCLES = 500_000


def calls_per_graph(estimate_ms: float) -> int:
    """Enough calls that one replay lasts about TARGET_REPLAY_MS, between 1 and MAX_CALLS."""
    if not math.isfinite(estimate_ms) or estimate_ms <= 0:
        return MAX_CALLS
    return int(min(MAX_CALLS, max(1, math.ceil(TARGET_REPLAY_MS / estimate_ms))))


def replays_for(replay_ms: float, rep_ms: float = timing.REP_MS) -> int:
    return int(min(MAX_REPLAYS, max(MIN_REPLAYS, rep_ms / max(replay_ms, 1e-3))))


def _estimate_ms(fn: Callable[[], Any], calls: int = 5) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def time_cuda_graph(
    fn: Callable[[], Any],
    *,
    l2_bytes: int,
    nvtx_name: str = "",
    n_calls: int | None = None,
    rep_ms: float = timing.REP_MS,
    sampler: Sampler | None = None,
    regime: Regime,
) -> timing.Timing:
    """Capture n_calls calls of fn in one CUDA graph; time replays with events; report per call.

    fn must be capturable: no host synchronization, no CPU-side data-dependent control flow.
    """
    # Warm up on a side stream, as capture requires: compilation, autotuning and first-call
    # allocations happen here, outside the graph.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    n = n_calls or calls_per_graph(_estimate_ms(fn))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            fn()  # outputs are dropped at once, so the graph's pool reuses their memory
    graph.replay()  # the first replay uploads the graph; do not time it
    torch.cuda.synchronize()
    result = _time_batches(graph.replay, n, l2_bytes, nvtx_name, rep_ms, "cuda_graph", sampler, regime)
    del graph
    return result


def time_stream(
    fn: Callable[[], Any],
    *,
    n_calls: int,
    l2_bytes: int,
    nvtx_name: str = "",
    rep_ms: float = timing.REP_MS,
    regime: Regime,
) -> timing.Timing:
    """The same n_calls launched one after another from Python, as an eager program would: where
    the host enqueues slower than the GPU runs, the GPU idles and these events time the gaps."""

    def batch() -> None:
        for _ in range(n_calls):
            fn()

    return _time_batches(batch, n_calls, l2_bytes, nvtx_name, rep_ms, "cuda_events_stream", None, regime)


def launch_overhead(
    fn: Callable[[], Any],
    *,
    l2_bytes: int,
    nvtx_name: str = "",
    rep_ms: float = timing.REP_MS,
    sampler: Sampler | None = None,
    regime: Regime,
) -> tuple[timing.Timing, float]:
    """Graph time per call, and launch overhead: back-to-back call time minus graph time, per call.
    The sampler reads the graph replays, whose time the row keeps."""
    n = calls_per_graph(_estimate_ms(fn))
    graphed = time_cuda_graph(
        fn, l2_bytes=l2_bytes, nvtx_name=nvtx_name, n_calls=n, rep_ms=rep_ms, sampler=sampler, regime=regime
    )
    streamed = time_stream(
        fn, n_calls=n, l2_bytes=l2_bytes, nvtx_name=nvtx_name + "/stream", rep_ms=rep_ms, regime=regime
    )
    return graphed, streamed.median_ms - graphed.median_ms


def _time_batches(
    run_batch: Callable[[], Any],
    n: int,
    l2_bytes: int,
    nvtx_name: str,
    rep_ms: float,
    mode: str,
    sampler: Sampler | None,
    regime: Regime,
) -> timing.Timing:
    sampler = sampler or NullSampler()
    flush = timing.l2_flush(l2_bytes)
    replays = replays_for(_estimate_ms(run_batch, calls=2), rep_ms)
    sustained = regime == Regime.SUSTAINED
    if sustained:

        def chunk() -> None:
            flush()
            run_batch()
            torch.cuda.synchronize()

        timing.heat_up(chunk, sampler)
    spin = 0 if sustained or getattr(torch.cuda, "_sleep", None) is None else SPIN_CYCLES
    # Burst: the replays start from the state every burst row starts from, as time_cuda's calls do.
    with contextlib.nullcontext() if sustained else timing.burst_row(sampler):
        batch_ms, telemetry = timing.timed_samples(run_batch, replays, flush, sampler, nvtx_name, spin)
    measured = timing.summarize([ms / n for ms in batch_ms], mode, False)
    return dataclasses.replace(measured, calls=replays * n, busy_ms=sum(batch_ms), regime=regime, telemetry=telemetry)
