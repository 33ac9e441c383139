"""Timing a model's phases.

prefill: one forward over B x T tokens, timed like a kernel (rooflint.engine.timing: L2 flushed,
the GPU kept busy while the host enqueues, CUDA events), so it is device time.
generate: the prompt's prefill plus the greedy loop, timed whole: what a user waits for.
decode: the same runs' loops of N-1 steps (CUDA graphs replayed back to back); a sample is the
loop's time / steps.
On a CPU every phase is wall time. rep_ms <= 0 takes one warm sample of each (smoke runs, tests).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from rooflint.engine import timing

MIN_LOOPS, MAX_LOOPS = 3, 20


def _loops(estimate_ms: float, rep_ms: float) -> int:
    if rep_ms <= 0:  # smoke runs and tests: one sample, taken warm (the correctness run warmed it)
        return 1
    return int(min(MAX_LOOPS, max(MIN_LOOPS, rep_ms / max(estimate_ms, 1e-3))))


def time_prefill(fn: Callable[[], Any], device: torch.device, l2_bytes: int, rep_ms: float) -> timing.Timing:
    if device.type == "cuda" and rep_ms > 0:
        return timing.time_cuda(fn, l2_bytes=l2_bytes, rep_ms=rep_ms, nvtx_name="model/prefill")
    return _time_wall(fn, rep_ms, device)


def time_generation(
    start: Callable[[], Any], decode: Callable[[], Any], steps: int, device: torch.device, rep_ms: float
) -> tuple[timing.Timing, timing.Timing | None]:
    """Time whole generations; each also gives a decode sample (its loop's time / ``steps``).

    One series of runs for both: on a GPU three events (before the prompt's prefill, after it,
    after the loop) split each run, so the decode loop is timed from the moment its first graph
    can start, with nothing on the host in between.
    """
    cuda = device.type == "cuda"

    def once() -> tuple[float, float]:
        if cuda:
            marks = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            torch.cuda.synchronize()
            marks[0].record()
            start()
            marks[1].record()
            decode()
            marks[2].record()
            marks[2].synchronize()
            return marks[0].elapsed_time(marks[2]), marks[1].elapsed_time(marks[2])
        began = time.perf_counter()
        start()
        middle = time.perf_counter()
        decode()
        ended = time.perf_counter()
        return (ended - began) * 1e3, (ended - middle) * 1e3

    loops = _loops(once()[0], rep_ms) if rep_ms > 0 else 1  # a warm run first, except in smoke runs
    runs = [once() for _ in range(loops)]
    mode = "cuda_events" if cuda else "cpu_wall"
    whole = timing.summarize([total for total, _ in runs], mode, False)
    per_step = timing.summarize([loop / steps for _, loop in runs], mode, False) if steps else None
    return whole, per_step


def _time_wall(fn: Callable[[], Any], rep_ms: float, device: torch.device) -> timing.Timing:
    def once() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        began = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - began) * 1e3

    estimate_ms = once() if rep_ms > 0 else 0.0
    samples = [once() for _ in range(_loops(estimate_ms, rep_ms))]
    return timing.summarize(samples, "cuda_wall" if device.type == "cuda" else "cpu_wall", False)
