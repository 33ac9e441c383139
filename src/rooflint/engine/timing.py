"""Honest timing: warm up, flush L2 before every call, time each call with CUDA events.

Each sample is one call bracketed by its own pair of events, after a flush that leaves the L2
holding only clean lines of a buffer twice its size, so no input is still cache-resident from the
previous call and the kernel is measured against DRAM, which is what the roofline's bandwidth
ceiling describes.

Two regimes (docs/timing.md):
- burst (default): a spin kernel before each call, so the GPU never waits on the host and runs
  near its boost clock; what one kernel does on a healthy GPU, reproducible across machines.
- sustained: the calls run back to back after a heat-up that lasts until power and SM clock
  settle; what a training loop sees once the GPU sits at its power cap.
While the timed samples run, a Sampler (rooflint.engine.nvml) reads clocks, power and energy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from rooflint.engine.early_stop import checkpoints, first_checkpoint, long_enough, median_pinned
from rooflint.engine.nvml import SLOWDOWN_REASONS, NullSampler, Recording, Sampler, Telemetry, settled
from rooflint.engine.settings import Regime

WARMUP_MS = 25.0  # long enough for module load, autotuning replays and clock ramp-up
REP_MS = 200.0  # timed budget per variant
SUSTAINED_REP_MS = 1000.0  # longer in sustained: the energy counter ticks every few tens of ms
MIN_SAMPLES = 10
MAX_SAMPLES = 2000
MIN_FLUSH_BYTES = 256 * 2**20
HEAT_MIN_S = 2.0  # NVML's power reading is a ~1 s average: two 1 s windows to compare
HEAT_MAX_S = 10.0
CHUNK_MS = 50.0  # work enqueued between two checks of the heat-up's settle test
# Burst: before a row, the GPU sheds the last row's power (docs/timing.md, "Each burst row starts
# from the same state"): until NVML's reading is under COOL_SHARE of the power limit or has stopped falling (a GPU
# whose idle draw is higher), at most COOL_MAX_S.
COOL_SHARE = 0.25
COOL_MAX_S = 2.0
COOL_POLL_S = 0.05
COOL_PLATEAU = (0.3, 0.02)  # a fall under 2% of the limit over the last 0.3 s: no longer falling
# ...and a row that comes this long after the last timed row (the run's first, one after a compile)
# first heats the GPU for PREHEAT_S, so that it too starts a second after compute-bound work. A row
# right after another starts well under a second after it (its build and float64 check); one whose
# kernel compiles, 1-3 s later. From an idle GPU the power limiter clocks the first burst of
# compute-bound work down, so such a row would run slower than its neighbours; a short heat brings
# it back to their state. The threshold is not lower because rows 0.5-1 s after the last already
# start from that state, and heating them too would only lengthen every bench.
IDLE_BEFORE_PREHEAT_S = 1.0
PREHEAT_S = 0.5
# ...and the full cool-down (under COOL_SHARE) only follows what ran hot: the pre-heat, or a row whose
# timed samples NVML saw at the power cap or slowed by heat (HOT_REASONS), or one it could not read.
# Why that keeps every row's start state: the limiter clocks a row down once the power averaged over
# about a second reaches the limit. After a row that never reached it, that average is under the limit
# and falling; from under WARM_SHARE of it, as from under COOL_SHARE, only a row drawing about twice
# the limit could reach it within its few hundred ms of calls, so the next row's clock is the same
# either way. Such a row starts once the reading is under WARM_SHARE (after a memory-bound or short
# row: at once) instead of waiting 0.3-1 s for power that could not slow it. Temperature is not what
# the wait controls: it moves over tens of seconds, and a row slowed by it is marked throttled.
WARM_SHARE = 0.5
HOT_REASONS = frozenset({"sw_power_cap", *SLOWDOWN_REASONS})


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    n_samples: int
    mode: str  # cuda_events | cuda_graph | cpu_wall
    l2_flushed: bool
    calls: int = 0  # calls inside the timed window (a graph replay holds several)
    busy_ms: float = math.nan  # time the timed calls took, summed: the window minus flushes and spins
    regime: Regime = Regime.BURST
    telemetry: Telemetry | None = None  # what NVML read while the timed samples ran
    launch_overhead_ms: float = math.nan  # --cuda-graphs: back-to-back call time minus graph time


def summarize(samples_ms: list[float], mode: str, l2_flushed: bool) -> Timing:
    ordered = sorted(samples_ms)
    return Timing(
        median_ms=statistics.median(ordered),
        p20_ms=_quantile(ordered, 0.2),
        p80_ms=_quantile(ordered, 0.8),
        n_samples=len(ordered),
        mode=mode,
        l2_flushed=l2_flushed,
        calls=len(ordered),
        busy_ms=sum(ordered),
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


class L2Flush:
    """Evicts the L2 and leaves no dirty lines in it: write a buffer twice the L2, then read it.

    A write alone leaves the L2 full of the flush buffer's dirty lines; the timed call's misses
    must then write them back to DRAM before reusing their slots, so the call pays for the flush's
    writes and a memory-bound kernel looks slower than it is. The read-back pass evicts the dirty
    lines (their write-back happens in the flush, untimed) and leaves clean ones, which the call
    drops for free. ``clean=False`` is the write-only flush, kept to measure that difference.
    """

    def __init__(self, l2_bytes: int, clean: bool = True, device: str = "cuda") -> None:
        size = max(2 * l2_bytes, MIN_FLUSH_BYTES)
        self.nbytes = size
        self.clean = clean
        self.buffer = torch.empty(size // 4, dtype=torch.int32, device=device)
        self.sink = torch.empty((), dtype=torch.int64, device=device)  # preallocated: no alloc per flush
        if self.buffer.is_cuda:
            # The first launch of a kernel loads its module (CUDA's lazy loading), milliseconds that
            # would otherwise land in the first row's flushed estimate, which sizes that row's warm-up
            # and sample count: a process's first row got a third or less of its samples.
            self()
            torch.cuda.synchronize(self.buffer.device)

    def __call__(self, value: int = 0) -> None:
        self.buffer.fill_(value)
        if self.clean:
            torch.sum(self.buffer, dim=0, out=self.sink)


_flushes: dict[tuple[int, bool], L2Flush] = {}


def l2_flush(l2_bytes: int, clean: bool = True) -> L2Flush:
    """The shared flush for this L2 size (one buffer at a time: it takes 256 MiB or more)."""
    key = (max(2 * l2_bytes, MIN_FLUSH_BYTES), clean)
    if key not in _flushes:
        _flushes.clear()
        _flushes[key] = L2Flush(l2_bytes, clean)
    return _flushes[key]


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


def _flushed_estimate_ms(fn: Callable[[], Any], flush: L2Flush, calls: int = 5) -> float:
    """One flushed call, flush included: sizes warm-up, repetitions and heat-up chunks."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(calls):
        flush(i)
        fn()
    end.record()
    torch.cuda.synchronize()
    return max(start.elapsed_time(end) / calls, 1e-3)


def heat_up(
    run_chunk: Callable[[], None],
    sampler: Sampler,
    *,
    min_s: float = HEAT_MIN_S,
    max_s: float = HEAT_MAX_S,
    clock: Callable[[], float] = time.perf_counter,
) -> Telemetry:
    """Run ``run_chunk`` (a few tens of ms of work, synchronized) until the GPU settles: the
    median power and SM clock of the last second within 2% of the second before, after at least
    ``min_s`` and at most ``max_s``. Without NVML it runs ``min_s``."""
    with sampler.record() as recording:
        started = clock()
        while True:
            run_chunk()
            elapsed = clock() - started
            if elapsed >= max_s:
                break
            if elapsed >= min_s and (not sampler.available or settled(list(recording.readings))):
                break
    return recording.telemetry


def cool_down(
    sampler: Sampler,
    max_s: float = COOL_MAX_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.perf_counter,
    share: float = COOL_SHARE,
) -> float:
    """Burst: wait until the GPU has shed the power of what ran before, so a row's clock does not
    depend on the rows before it. The power limiter acts on power averaged over about a second
    (NVML's reading is such an average too): a row timed right after a compute-bound row starts
    with that average high and is clocked down within its 200 ms, while the first row of a run
    starts cool: the same kernel would time differently in two adjacent rows.
    ``share``: the reading to wait for, as a share of the power limit (COOL_SHARE after hot work).
    Returns the seconds waited (0 without NVML, or when the GPU is already cool)."""
    if not sampler.available:
        return 0.0
    began = clock()
    span_s, least_fall = COOL_PLATEAU
    seen = [(began, sampler.power_share())]  # (time, share): NVML may update its reading less often than we poll
    while math.isfinite(seen[-1][1]) and seen[-1][1] > share and clock() - began < max_s:
        sleep(COOL_POLL_S)
        now = clock()
        seen.append((now, sampler.power_share()))
        before = [share for t, share in seen if t <= now - span_s]
        if before and before[-1] - seen[-1][1] < least_fall:
            break  # no longer falling: this GPU's idle draw (or another process's load)
    return clock() - began


def ran_hot(telemetry: Telemetry | None) -> bool:
    """Whether timed work may have left the power limiter engaged: NVML saw the power cap or a
    thermal or hardware slowdown while it ran, or read nothing (unknown counts as hot)."""
    if not getattr(telemetry, "n_readings", 0):
        return True
    return bool(HOT_REASONS.intersection(telemetry.reasons))


class _BurstState:
    """What start_state remembers in this process: when its last burst row ended, whether it ran
    hot (ran_hot), and the matmul chunk that heats the GPU (built once)."""

    last_row_end: float | None = None
    last_row_hot: bool = True
    heat: Callable[[], None] | None = None
    start_state_s: float = 0.0  # seconds spent reaching the start state so far (a run's "cool" time)


def start_state(sampler: Sampler, heat: Callable[[], None] | None = None, sleep=time.sleep, clock=time.perf_counter):
    """Burst: bring the GPU to the state every row starts from, a second or so after compute-bound
    work (cool_down). A row more than IDLE_BEFORE_PREHEAT_S after the last one (the run's first; one
    whose kernel compiled) would otherwise start from an idle GPU, whose clock differs from its
    neighbours': the power limiter clocks down an idle GPU's first burst of matmuls.
    `heat` runs compute-bound work (bf16 matmuls by default) for PREHEAT_S first in that case.
    The wait goes down to COOL_SHARE after hot work (the pre-heat, a row that ran hot), else to
    WARM_SHARE (see WARM_SHARE for why that start state is the same for the power limiter)."""
    if not sampler.available:
        return
    last, hot = _BurstState.last_row_end, _BurstState.last_row_hot
    if last is None or clock() - last > IDLE_BEFORE_PREHEAT_S:
        if heat is None:
            _BurstState.heat = _BurstState.heat or matmul_chunk(calls=10)
            heat = _BurstState.heat
        run_for(heat, PREHEAT_S, clock)
        hot = True  # matmuls at the power cap, by design
    cool_down(sampler, sleep=sleep, clock=clock, share=COOL_SHARE if hot else WARM_SHARE)


@contextlib.contextmanager
def burst_row(sampler: Sampler) -> Iterator[None]:
    """A burst row's timing, by any timer (events, CUDA-graph replays): the GPU brought to the start
    state first (start_state), and the row's end remembered for the next row's."""
    began = time.perf_counter()
    start_state(sampler)
    _BurstState.start_state_s += time.perf_counter() - began
    _BurstState.last_row_hot = True  # until its timed samples say otherwise (timed_samples)
    try:
        yield
    finally:
        _BurstState.last_row_end = time.perf_counter()


def start_state_seconds() -> float:
    """Seconds this process has spent bringing the GPU to the burst start state (pre-heat and
    cool-down): the worker reports them apart from the timing itself."""
    return _BurstState.start_state_s


def time_cuda(
    fn: Callable[[], Any],
    *,
    l2_bytes: int,
    nvtx_name: str = "",
    warmup_ms: float = WARMUP_MS,
    rep_ms: float = REP_MS,
    sampler: Sampler | None = None,
    flush: L2Flush | None = None,
    max_noise: float = 0.0,
) -> Timing:
    """Burst regime: device time of one call, flushed: median, p20, p80 over many samples.

    Before each sample the GPU is given a spin kernel that lasts longer than Python takes to
    enqueue the call, so the start event fires only once the whole call is queued behind it. The
    time is then what the GPU spends on the call, not how fast the host launched it: without the
    spin, any call whose Python launch takes longer than the flush kernel runs would have the
    host's latency timed as its own. Launch overhead is measured separately (--cuda-graphs).

    ``max_noise`` > 0 (--max-noise) lets the samples stop once the median is known to within that
    share of itself, after NOISE_MIN_MS of them and never in a window that reached the power cap.
    """
    sampler = sampler or NullSampler()
    flush = flush or l2_flush(l2_bytes)
    fn()
    torch.cuda.synchronize()
    with burst_row(sampler):
        host_s = []
        for _ in range(5):
            began = time.perf_counter()
            fn()
            host_s.append(time.perf_counter() - began)
        torch.cuda.synchronize()
        estimate_ms = _flushed_estimate_ms(fn, flush)
        for _ in range(max(1, int(warmup_ms / estimate_ms))):
            fn()
        # Twice the slowest host enqueue seen, plus margin for the event record itself.
        spin = int(spin_cycles_per_us() * (2 * max(host_s) * 1e6 + 20))
        n = int(min(MAX_SAMPLES, max(MIN_SAMPLES, rep_ms / estimate_ms)))
        first = first_checkpoint(estimate_ms)
        samples, telemetry = timed_samples(fn, n, flush, sampler, nvtx_name, spin, max_noise=max_noise, first=first)
    return dataclasses.replace(summarize(samples, "cuda_events", True), regime=Regime.BURST, telemetry=telemetry)


def time_cuda_sustained(
    fn: Callable[[], Any],
    *,
    l2_bytes: int,
    nvtx_name: str = "",
    rep_ms: float = SUSTAINED_REP_MS,
    sampler: Sampler | None = None,
    flush: L2Flush | None = None,
    heat_min_s: float = HEAT_MIN_S,
    heat_max_s: float = HEAT_MAX_S,
) -> Timing:
    """Sustained regime: calls back to back, as a training loop runs them, after a heat-up.

    The flush still runs before each call (a training step's other ops evict the L2 too), but no
    spin: the GPU goes straight from one call to the next. The flush (0.1 ms or more of GPU work)
    gives the host time to enqueue the next call, so launch gaps stay out of the samples.
    """
    sampler = sampler or NullSampler()
    flush = flush or l2_flush(l2_bytes)
    fn()
    torch.cuda.synchronize()
    estimate_ms = _flushed_estimate_ms(fn, flush)
    per_chunk = max(1, int(CHUNK_MS / estimate_ms))

    def chunk() -> None:
        for i in range(per_chunk):
            flush(i)
            fn()
        torch.cuda.synchronize()

    n = int(min(MAX_SAMPLES, max(MIN_SAMPLES, rep_ms / estimate_ms)))
    heat_up(chunk, sampler, min_s=heat_min_s, max_s=heat_max_s)
    samples, telemetry = timed_samples(fn, n, flush, sampler, nvtx_name, spin_cycles=0)
    return dataclasses.replace(summarize(samples, "cuda_events", True), regime=Regime.SUSTAINED, telemetry=telemetry)


def timed_samples(
    run: Callable[[], Any],
    n: int,
    flush: L2Flush,
    sampler: Sampler,
    nvtx_name: str,
    spin_cycles: int,
    *,
    max_noise: float = 0.0,
    first: int = 0,
) -> tuple[list[float], Any]:
    """The sample loop every CUDA timer shares (burst, sustained, graph replays): per sample, flush
    the L2, queue a spin kernel when ``spin_cycles`` (burst: the start event then fires only once
    the call is queued), and time one ``run`` between two events. The sampler's window holds the
    timed samples and nothing before them. Returns the samples in ms and the sampler's telemetry.

    With ``max_noise`` the loop may stop before ``n``: at each of ``checkpoints(n, first)`` it reads
    the events so far and stops once their window has run NOISE_MIN_MS (long_enough), the median is
    pinned (median_pinned) and NVML has seen no power cap or slowdown in the window (may_stop_early)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    samples: list[float] = []
    torch.cuda.synchronize()
    with nvtx_range(nvtx_name) if nvtx_name else contextlib.nullcontext(), sampler.record() as recording:
        done = 0
        for stop in checkpoints(n, first) if max_noise > 0 else [n]:
            for i in range(done, stop):
                flush(i)
                if spin_cycles:
                    torch.cuda._sleep(spin_cycles)
                starts[i].record()
                run()
                ends[i].record()
            torch.cuda.synchronize()
            samples += [starts[i].elapsed_time(ends[i]) for i in range(done, stop)]
            done = stop
            if (
                stop < n
                and long_enough(starts[0].elapsed_time(ends[stop - 1]))
                and median_pinned(samples, max_noise)
                and may_stop_early(sampler, recording)
            ):
                break
    _BurstState.last_row_hot = ran_hot(recording.telemetry)  # what the next burst row's cool-down waits for
    return samples, recording.telemetry


def may_stop_early(sampler: Sampler, recording: Recording) -> bool:
    """Whether the window so far allows an early stop: once NVML has read the GPU and seen neither
    the power cap nor a slowdown (ran_hot), since a row that reaches the cap would settle at a lower
    clock later in its window. Without NVML nothing tells, so never (unknown counts as hot)."""
    if not sampler.available:
        return False
    readings = list(recording.readings)
    return not ran_hot(Telemetry.from_readings(readings, math.nan, math.nan))


def time_cpu(
    fn: Callable[[], Any],
    *,
    warmup_ms: float = WARMUP_MS,
    rep_ms: float = REP_MS,
    sampler: Sampler | None = None,
    regime: Regime,
    max_noise: float = 0.0,
) -> Timing:
    """Wall-clock timing with the same statistics; CPU caches are not flushed (recorded as such).
    Sustained runs the calls for HEAT_MIN_S first, so the CPU's turbo has settled too. In burst,
    ``max_noise`` stops the samples once the median is pinned (median_pinned), after NOISE_MIN_MS."""
    sampler = sampler or NullSampler()
    fn()
    started = time.perf_counter()
    fn()
    estimate_ms = max((time.perf_counter() - started) * 1e3, 1e-3)
    if regime == Regime.SUSTAINED:
        per_chunk = max(1, int(CHUNK_MS / estimate_ms))
        heat_up(lambda: [fn() for _ in range(per_chunk)], sampler, max_s=HEAT_MIN_S)
    deadline = time.perf_counter() + warmup_ms / 1e3
    while time.perf_counter() < deadline:
        fn()
    n = int(min(MAX_SAMPLES, max(MIN_SAMPLES, rep_ms / estimate_ms)))
    early = max_noise if regime == Regime.BURST else 0.0
    samples: list[float] = []
    with sampler.record() as recording:
        began = time.perf_counter()
        for stop in checkpoints(n, first_checkpoint(estimate_ms)) if early else [n]:
            while len(samples) < stop:
                t0 = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - t0) * 1e3)
            if stop < n and long_enough((time.perf_counter() - began) * 1e3) and median_pinned(samples, early):
                break
    measured = summarize(samples, "cpu_wall", False)
    return dataclasses.replace(measured, regime=regime, telemetry=recording.telemetry)


# ------------------------------------------------------------------- the reference clock


def matmul_load(n: int = 4096) -> Callable[[], Any]:
    """Dense bf16 matmuls on the tensor cores: the load that draws the most power per second."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    return lambda: torch.mm(a, b, out=c)


def matmul_chunk(calls: int = 20) -> Callable[[], None]:
    """One unit of heating work: `calls` back-to-back matmul_load calls, then a sync."""
    load = matmul_load()

    def chunk() -> None:
        for _ in range(calls):
            load()
        torch.cuda.synchronize()

    return chunk


def run_for(chunk: Callable[[], None], seconds: float, clock: Callable[[], float] = time.perf_counter) -> None:
    """Run `chunk` again and again until `seconds` have passed."""
    began = clock()
    while clock() - began < seconds:
        chunk()


def loaded_telemetry(sampler: Sampler, regime: Regime, burst_s: float = 0.3, ramp_s: float = 0.5) -> Telemetry:
    """Clocks, power and reasons under back-to-back bf16 matmuls: 0.3 s of them after a 0.5 s
    ramp from idle (burst), or after a heat-up until power and clock settle (sustained). Its SM
    clock is the reference a run's rows are judged against for throttling."""
    if not sampler.available or not torch.cuda.is_available():
        return Telemetry()
    chunk = matmul_chunk()
    # cuBLAS picks its kernel and the clock leaves idle. A much shorter ramp catches the power
    # controller mid-step from idle, reporting a power cap and a clock far under the one the bench
    # rows right after it run at.
    run_for(chunk, ramp_s)
    if regime == Regime.SUSTAINED:
        heat_up(chunk, sampler)
    with sampler.record() as recording:
        run_for(chunk, burst_s)
    return recording.telemetry
