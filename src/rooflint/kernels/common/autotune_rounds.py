"""Autotuning in rounds: every config timed once a round, the pick the lowest median over the rounds.

Triton's autotuner times its configs one after the other, each in one window of about 125 ms, and
keeps the fastest. A GPU's clock is not steady over the few hundred milliseconds that takes: under a
large GEMM an H200 reaches its power cap and its clock falls in steps while the power rises, so the
config timed during a dip can lose to a slower one. The reference run's int8 8192^3 GEMM got a
config 17% slower than the one every quiet autotune picked, and compare called the kernel slower
(docs/perf-notes/quantized.md). Here each config still gets Triton's first call and a short first
timing (its compile, and Triton's own handling of a config that cannot run); then the configs that
ran are timed again in ROUNDS rounds, each once a round, so a dip falls on one round of one config
and the median over the rounds leaves it out.

The autotuner's ``do_bench`` is the hook (a public argument of ``triton.autotune``): ``Recorder``
times the first pass and keeps each config's launch; ``refine`` runs the rounds after the launch
that timed a new key, replaces the pick in the autotuner's cache and launches the pick once more,
so that the output is the pick's. A launch that cannot be matched to its config keeps Triton's pick.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from rooflint.core.triton_compat import triton

ROUNDS = 3
FIRST_MS = 10  # the first pass: Triton's pick if the rounds cannot run
ROUND_MS = 30  # each config's window in each round (do_bench's rep, L2 flushed between calls)
WARMUP_MS = 5


def time_ms(call: Callable[[], Any], rep_ms: float) -> float:
    """The median of ``call``'s times over about ``rep_ms`` milliseconds (triton.testing.do_bench, L2
    flushed before each call)."""
    return float(triton.testing.do_bench(call, warmup=WARMUP_MS, rep=rep_ms, return_mode="median"))


class Recorder:
    """An autotuner's ``do_bench``: times each config briefly, as Triton would at length, and keeps
    its launch for the rounds. A config that raises (too many resources, say) is not kept: Triton
    catches the error and marks that config unusable."""

    def __init__(self) -> None:
        self.calls: list[Callable[[], Any]] = []

    def __call__(self, kernel_call: Callable[[], Any], quantiles: Any = None) -> list[float]:
        ms = time_ms(kernel_call, FIRST_MS)
        self.calls.append(kernel_call)
        return [ms, ms, ms] if quantiles else ms  # Triton asks for (median, p20, p80) and takes the min


def install(autotuner: Any) -> Recorder:
    """The autotuner's recorder, set as its ``do_bench`` on first use (an instance attribute overrides
    Triton's cached benchmarker)."""
    recorder = getattr(autotuner, "_rooflint_recorder", None)
    if recorder is None:
        recorder = Recorder()
        autotuner.do_bench = recorder
        autotuner._rooflint_recorder = recorder
    return recorder


def config_of(kernel_call: Callable[[], Any], configs: list[Any]) -> Any:
    """The config a launch of Triton's ``_bench`` runs: the closure's ``config`` cell, if it is one of
    ``configs`` (identity); else None."""
    cells = dict(zip(kernel_call.__code__.co_freevars, kernel_call.__closure__ or ()))
    try:
        config = cells["config"].cell_contents
    except (KeyError, ValueError):  # not Triton's closure, or an empty cell
        return None
    return config if any(config is known for known in configs) else None


def refine(autotuner: Any, key: Any) -> Any:
    """Time the launches the autotuner's recorder kept for ``key`` in rounds and make the fastest its
    pick; returns it (None where it kept none, or they could not be matched to configs: Triton's pick
    stays)."""
    recorder = install(autotuner)
    calls, recorder.calls = recorder.calls, []
    configs = [config_of(call, autotuner.configs) for call in calls]
    if len(calls) < 2 or any(config is None for config in configs):
        return None
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(ROUNDS):
        for timed, call in zip(times, calls):
            timed.append(time_ms(call, ROUND_MS))
    medians = [statistics.median(timed) for timed in times]
    best = min(range(len(calls)), key=medians.__getitem__)
    autotuner.cache[key] = configs[best]
    autotuner.best_config = configs[best]
    autotuner.configs_timings = {config: [m, min(t), max(t)] for config, m, t in zip(configs, medians, times)}
    calls[best]()  # the launch that timed the key ran the first pass's pick: the output is now the pick's
    return configs[best]
