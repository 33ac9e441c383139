"""When a burst row has sampled enough (`bench --max-noise`, docs/timing.md): a distribution-free
interval of the median, the rule that it is pinned, the least window before any early stop, and
the sample counts at which the timer looks. Pure statistics: the timer (engine/timing.py) applies them.
"""

from __future__ import annotations

import math
import statistics

# --max-noise (off by default): a memory-bound burst row may stop sampling once its median is pinned
# down, but never before NOISE_MIN_MS of samples (NVML reads every ~15 ms: a few readings of clocks and
# power for the throttle check), and only while NVML has seen no power cap in the window. A
# compute-bound row's clock settles over its whole budget, so the worker never lets it stop early.
NOISE_MIN_MS = 50.0
# Fewer samples than this say nothing of a median's interval (at n = 10 it spans them all).
MIN_PINNED_SAMPLES = 10
Z95 = 1.96


def median_interval(ordered: list[float]) -> tuple[float, float]:
    """A distribution-free 95% interval of the median of sorted samples: the order statistics whose
    ranks lie Z95 standard deviations either side of n/2 (the median's rank is Binomial(n, 1/2)),
    widened outward to whole ranks and clipped to the samples."""
    n = len(ordered)
    spread = Z95 * math.sqrt(n) / 2
    low = max(0, math.floor(n / 2 - spread) - 1)
    high = min(n - 1, math.ceil(n / 2 + spread))
    return ordered[low], ordered[high]


def median_pinned(samples_ms: list[float], max_noise: float) -> bool:
    """Whether the median of ``samples_ms`` is known to within ``max_noise`` of itself: its 95%
    interval's half-width at most that share of it. Never with fewer than MIN_PINNED_SAMPLES."""
    if max_noise <= 0 or len(samples_ms) < MIN_PINNED_SAMPLES:
        return False
    ordered = sorted(samples_ms)
    low, high = median_interval(ordered)
    median = statistics.median(ordered)
    return median > 0 and (high - low) / 2 <= max_noise * median


def long_enough(window_ms: float) -> bool:
    """Whether the samples so far have run NOISE_MIN_MS, the least before an early stop. Checkpoints
    are sized from a row's estimate, which can be many times its calls' real time (a row after an
    idle GPU): their window is what NVML and the rule see (a microsecond's slack: summed clocks round)."""
    return window_ms >= NOISE_MIN_MS - 1e-3


def checkpoints(n: int, first: int) -> list[int]:
    """Sample counts at which an early stop is considered: ``first``, then every half of it more,
    up to ``n`` (always the last)."""
    first = max(1, min(first, n))
    step = max(1, first // 2)
    return [*range(first, n, step), n]


def first_checkpoint(estimate_ms: float) -> int:
    """The sample count at which a row first looks: NOISE_MIN_MS of calls of ``estimate_ms`` each,
    at least MIN_PINNED_SAMPLES."""
    return max(MIN_PINNED_SAMPLES, int(NOISE_MIN_MS / estimate_ms))
