"""The worker's timer: one call of a variant timed by the CPU wall clock, CUDA graphs, or CUDA
events in the chosen regime.

It sits above both timing.py (events, burst and sustained) and graph_timing.py (graph replays),
which build on timing.py's flush and sample loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from rooflint.engine import graph_timing, timing
from rooflint.engine.nvml import NullSampler, Sampler
from rooflint.engine.settings import Regime


def measure(
    fn: Callable[[], Any],
    *,
    device: str,
    regime: Regime | str,
    sampler: Sampler | None = None,
    l2_bytes: int = 0,
    nvtx_name: str = "",
    cuda_graphs: bool = False,
    max_noise: float = 0.0,
) -> timing.Timing:
    """Time ``fn`` on ``device``; a regime that is not one of Regime is a UserError. ``max_noise``
    (--max-noise) lets a burst row's event or wall-clock samples stop early (early_stop.median_pinned);
    graph replays and the sustained regime always take their full budget."""
    regime = Regime.parse(regime)
    sampler = sampler or NullSampler()
    if device != "cuda":
        return timing.time_cpu(fn, sampler=sampler, regime=regime, max_noise=max_noise)
    if cuda_graphs:
        graphed, overhead = graph_timing.launch_overhead(
            fn, l2_bytes=l2_bytes, nvtx_name=nvtx_name, sampler=sampler, regime=regime
        )
        return dataclasses.replace(graphed, launch_overhead_ms=overhead)
    if regime == Regime.SUSTAINED:
        return timing.time_cuda_sustained(fn, l2_bytes=l2_bytes, nvtx_name=nvtx_name, sampler=sampler)
    return timing.time_cuda(fn, l2_bytes=l2_bytes, nvtx_name=nvtx_name, sampler=sampler, max_noise=max_noise)
