"""The bench worker: builds inputs, checks each variant against float64, times it, emits rows.

bench runs workers as child processes (one per GPU) that print one JSON event per line. A variant
that kills its process (a segfault, an illegal address that poisons the CUDA context) then costs
only itself: the parent records it as crashed and starts a fresh worker for the tasks left.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import math
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch

from rooflint.core import autotune_tally
from rooflint.core.errors import VariantSkipped, describe
from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC, NEEDS_TRITON, Case, Family, Variant
from rooflint.core.registry import get_family
from rooflint.core.roofline import analyse, copy_to_row, floor_seconds
from rooflint.core.specs import GpuSpec, current_gpu_spec, spec_from_dict
from rooflint.core.triton_compat import HAS_TRITON
from rooflint.engine import compile_caches, cuda_build, environment, nvml, throttle, timing
from rooflint.engine.correctness import check, tensors
from rooflint.engine.cuda_build import nvcc_path
from rooflint.engine.parent_watch import end_with_parent, watched_parent
from rooflint.engine.reference_cache import ReferenceCache, reference_key
from rooflint.engine.run_clock import PhaseClock
from rooflint.engine.settings import MeasureSettings
from rooflint.engine.tasks import Task, base_row
from rooflint.engine.timer import measure
from rooflint.outputs.results import (
    ERROR,
    FAILED,
    OK,
    OOM,
    SHARED_GPU_NOTE,
    SKIPPED,
    ResultRow,
    json_safe,
    record_of,
)

# Variant kinds (core/family.VARIANT_KINDS) that compile and build nothing: their first calls read
# none of the compile caches (nvcc's, Triton's, Inductor's).
EAGER_KINDS = ("eager", "eager_unfused")


def missing_requirement(variant: Variant, device: str) -> str | None:
    """Why a variant cannot run on this machine, or None."""
    if variant.library is not None:  # a third-party peer: installed, and built for this GPU?
        reason = variant.library.missing(device)
        if reason:
            return reason
    for need in variant.needs:
        if need == NEEDS_CUDA and device != "cuda":
            return "needs a CUDA GPU"
        if need == NEEDS_TRITON and not HAS_TRITON:
            return "needs the triton package"
        if need == NEEDS_NVCC and nvcc_path() is None:
            return "needs nvcc (set CUDA_HOME or put nvcc on PATH)"
    return None


class Worker:
    def __init__(
        self,
        device: str,
        spec: GpuSpec,
        settings: MeasureSettings | None = None,
        *,
        sampler: nvml.Sampler | None = None,
        timer: Callable[..., timing.Timing] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        reference_clock_mhz: float | None = None,
        reference_cache: ReferenceCache | None = None,
    ) -> None:
        """``sampler``, ``timer``, ``sleep`` and ``reference_clock_mhz`` are for tests: a fake
        sampler and timer drive the throttle retry on a CPU. ``timer(fn, nvtx_name=, sampler=)``.
        ``reference_cache``: where float64 references are kept between runs; None computes each."""
        self.device = device
        self.spec = spec
        self.settings = settings = settings or MeasureSettings()
        regime = settings.regime
        self.sampler = sampler if sampler is not None else nvml.sampler_for(device)
        before = self.sampler.compute_processes()  # before this process makes its CUDA context
        self.env = environment.collect(device)
        timed = functools.partial(
            measure, device=device, regime=regime, l2_bytes=spec.l2_bytes, cuda_graphs=settings.cuda_graphs
        )
        self.timer = timer or functools.partial(timed, max_noise=settings.max_noise)
        # A row not known to be memory-bound takes its full budget whatever --max-noise says: a
        # compute-bound row's clock settles over the whole window (docs/timing.md), so its first
        # samples can sit off its full median; one whose bound is unknown (a peak missing from the
        # spec) may be such a row.
        self.compute_timer = timer or functools.partial(timed, max_noise=0.0)
        self.sleep = sleep
        if reference_clock_mhz is None and device == "cuda":
            reference_clock_mhz = timing.loaded_telemetry(self.sampler, regime).sm_clock_mhz
        self.reference = throttle.reference_clock(
            math.nan if reference_clock_mhz is None else reference_clock_mhz,
            self.sampler.max_sm_clock_mhz(),
            regime,
            settings.throttle.threshold,
        )
        self.own_pids = nvml.own_pids(before, self.sampler.compute_processes())
        self._warned_processes: set[int] = set()
        self._case_key: tuple | None = None
        self._case: Case | None = None
        self._reference: Any = None
        self._baseline_ms: dict[tuple, float] = {}  # (family, dtype, shape) -> the family baseline's median
        self.clock = PhaseClock()  # where this process's time goes, sent to the parent with each row
        self.reference_cache = reference_cache

    def _stamp(self, row: ResultRow) -> ResultRow:
        return environment.stamp(row, self.spec, self.device, self.env)

    def _prepare(self, family: Family, task: Task) -> tuple[Case, Any]:
        key = (task.family, task.dtype, task.size, json.dumps(task.params, sort_keys=True))
        if key != self._case_key:
            self._case = self._reference = None
            self._release()
            with self.clock.phase("inputs"):
                case = family.build_case(task.size, task.params, task.dtype, torch.device(self.device), seed=INPUT_SEED)
            with self.clock.phase("reference"):
                reference = self._reference_for(family, task, case)
            self._case_key, self._case, self._reference = key, case, reference
        return self._case, self._reference

    def _reference_for(self, family: Family, task: Task, case: Case) -> Any:
        """The float64 reference: read from the reference cache where it holds it, else computed
        (and stored when reading it back is faster than computing it)."""
        cache = self.reference_cache
        key = reference_key(family, task.params, task.dtype, INPUT_SEED, self.device) if cache else ""
        if cache is not None:
            stored = cache.load(key, self.device)
            if stored is not None:
                self.clock.count("reference_hits")
                return stored
        began = time.perf_counter()
        with torch.no_grad():
            reference = family.reference(case.inputs, task.params)
        if cache is None:
            return reference
        if self.device == "cuda":
            torch.cuda.synchronize()  # the compute time decides whether storing pays
        if cache.worth_storing(reference, time.perf_counter() - began) and cache.store(key, reference):
            self.clock.count("reference_misses")
        else:
            self.clock.count("reference_recomputed")
        return reference

    def _release(self, force: bool = False) -> None:
        release_memory(self.device, force=force)

    def run(self, task: Task) -> ResultRow:
        family = get_family(task.family)
        variant = family.variants[task.variant]
        reason = missing_requirement(variant, self.device)
        if reason:
            return self._stamp(base_row(task, variant.kind, SKIPPED, reason))
        try:
            case, reference = self._prepare(family, task)
        except torch.OutOfMemoryError:
            self._case_key = None
            self._release(force=True)
            return self._stamp(base_row(task, variant.kind, OOM, "out of memory building inputs or reference"))
        try:
            return self._stamp(self._measure(family, variant, task, case, reference))
        except VariantSkipped as skipped:
            return self._stamp(base_row(task, variant.kind, SKIPPED, str(skipped)))
        except torch.OutOfMemoryError:
            self._release(force=True)
            return self._stamp(base_row(task, variant.kind, OOM, "out of memory"))
        except Exception as error:  # a broken variant is a row, not the end of the run
            where = traceback.extract_tb(error.__traceback__)[-1]
            message = f"{describe(error)} ({where.filename.rsplit('/', 1)[-1]}:{where.lineno})"
            return self._stamp(base_row(task, variant.kind, ERROR, message))

    def _measure(self, family: Family, variant: Variant, task: Task, case: Case, reference: Any) -> ResultRow:
        row = base_row(task, variant.kind, OK)
        cuda = self.device == "cuda"
        with self._first_calls():
            fn = variant.build(case)
            output = fn()
            if cuda:
                row.peak_extra_memory_bytes = _scratch_bytes(fn, output)
        # A variant that compiles or builds looked in the compile caches (a hit adds no entry to
        # count). Without one the record calls none of them warm: the entries they held before the
        # run were never read (every row skipped, or eager variants only).
        if variant.kind not in EAGER_KINDS or variant.sources:
            self.clock.count("compiled_first_calls")
        with self.clock.phase("check"):
            verdict = check(family, task.dtype, output, reference)
        row.rel_error, row.tolerance = verdict.error, verdict.tolerance
        del output
        cost = family.cost(task.params, task.dtype)
        counts = {"tensor_flops": cost.tensor_flops, "cuda_flops": cost.cuda_flops, "bytes": cost.bytes}
        if variant.modeled_bytes is not None:
            counts["modeled_bytes"] = float(variant.modeled_bytes(task.params, task.dtype))
        # A (plugin's) cost model that counts negative work: its row was written ok, plotted and
        # exit 0, and every reader then refused the whole results file over that one number.
        negative = [f"{name}={value:g}" for name, value in counts.items() if value < 0]
        if negative:
            raise ValueError(f"the cost model of {family.name} gives {', '.join(negative)}; valid: counts of 0 or more")
        row.tensor_flops, row.cuda_flops, row.ideal_bytes = cost.tensor_flops, cost.cuda_flops, cost.bytes
        row.modeled_bytes = counts.get("modeled_bytes", row.modeled_bytes)
        if not verdict.passed:
            row.status, row.message = FAILED, verdict.message
            return row
        # Compute-bound work may hold the GPU at its power cap by itself (throttle.POWER_CAPPED_NOTE).
        _, bound = floor_seconds(cost, self.spec, family.tensor_precision(task.dtype))
        judged = self._timed(fn, task, bound)
        measured = judged.timing
        throttle.fill_row(row, judged)  # clocks, power, energy, reasons, throttled, retries
        row.launch_overhead_ms = measured.launch_overhead_ms
        row.timing_mode, row.l2_flushed = measured.mode, measured.l2_flushed
        row.n_samples, row.median_ms, row.p20_ms, row.p80_ms = (
            measured.n_samples,
            measured.median_ms,
            measured.p20_ms,
            measured.p80_ms,
        )
        point = analyse(cost, measured.median_ms / 1e3, self.spec, family.tensor_precision(task.dtype))
        copy_to_row(point, row)
        others = nvml.other_processes(self.sampler, self.own_pids)
        if others and not {p.pid for p in others} <= self._warned_processes:
            self._warned_processes |= {p.pid for p in others}  # stderr (worker.log) once per process
            print("warning: other processes on this GPU: " + ", ".join(p.describe() for p in others), file=sys.stderr)
        notes = [
            str(getattr(fn, "note", "") or ""),
            judged.message,
            (SHARED_GPU_NOTE + ": " + ", ".join(p.describe() for p in others)) if others else "",
        ]
        if any(notes):
            row.message = "; ".join(note for note in notes if note)
        # speedup_vs_eager is against the family's declared baseline (Family.baseline), which bench
        # runs first in each (dtype, shape); without its row (filtered out, failed) there is none.
        baseline_key = (task.family, task.dtype, row.shape)
        if variant is family.baseline:
            self._baseline_ms[baseline_key] = measured.median_ms
        if baseline_key in self._baseline_ms:
            row.speedup_vs_eager = self._baseline_ms[baseline_key] / measured.median_ms
        del fn
        return row

    @contextlib.contextmanager
    def _first_calls(self) -> Iterator[None]:
        """A variant's build and first calls: "build" for the seconds spent in nvcc or waiting for
        the build bench started ahead (cuda_build.BUILDS), "compile" for the rest (torch.compile,
        Triton's JIT and autotuning, loading a library). Entries added to Triton's and Inductor's
        caches are counted as misses; libraries, as the builds this process ran (a library bench
        built ahead is counted by bench)."""
        before = compile_caches.census()
        picks = dict(autotune_tally.PICKS)
        build_s, built = cuda_build.BUILDS.seconds, cuda_build.BUILDS.built
        began = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - began
            building = min(elapsed, cuda_build.BUILDS.seconds - build_s)
            self.clock.add("build", building)
            self.clock.add("compile", elapsed - building)
            added = compile_caches.added(before, compile_caches.census())
            added["build"] = cuda_build.BUILDS.built - built
            for name, count in added.items():
                if count:
                    self.clock.count(f"{name}_added", count)
            for name, count in autotune_tally.PICKS.items():  # picks served from the store, or timed
                if count > picks[name]:
                    self.clock.count(f"autotune_{name}", count - picks[name])

    def _timed(self, fn: Callable[[], Any], task: Task, bound: str) -> throttle.Judged:
        """Time a checked variant, re-timing it while throttled. Its seconds are split: reaching the
        burst start state and waiting out a throttle are "cool", the rest (warm-up, flushes,
        samples) is "measure". ``bound``: its floor's, "compute", "memory" or "" where unknown; only a
        memory-bound row may stop early (--max-noise)."""
        waited = 0.0

        def sleep(seconds: float) -> None:
            nonlocal waited
            began = time.perf_counter()
            self.sleep(seconds)
            waited += time.perf_counter() - began

        cooled = timing.start_state_seconds()
        began = time.perf_counter()
        judged = throttle.time_until_unthrottled(
            functools.partial(
                self.timer if bound == "memory" else self.compute_timer,
                fn,
                nvtx_name=task.nvtx_name,
                sampler=self.sampler,
            ),
            self.reference,
            self.settings.throttle,
            sleep,
            compute_bound=bound == "compute",
        )
        elapsed = time.perf_counter() - began
        cool = min(elapsed, timing.start_state_seconds() - cooled + waited)
        self.clock.add("cool", cool)
        self.clock.add("measure", elapsed - cool)
        return judged


# Every bench builds its inputs from this seed: the same inputs on every run, so a reference read
# from the reference cache is the one this run would compute.
INPUT_SEED = 0

# A full garbage collection walks every object the worker holds (torch, Inductor's graphs, Triton's
# kernels): 0.2 s or more a call, once per new case (87 cases in `bench all --size large` on an H200).
# Between cases it only matters where a reference cycle (a traceback's frames, a compiled closure)
# still holds the last case's device memory. So on a GPU it runs when more than this share of the
# device's memory is still allocated once the case is dropped; what cycles hold stays under it.
COLLECT_ABOVE_SHARE = 1 / 16


def release_memory(device: str, force: bool = False) -> bool:
    """Free what the last case held before the next is built: a full collection where the device
    still holds more than COLLECT_ABOVE_SHARE of its memory (always with ``force``, after an out of
    memory, and on the CPU, whose allocator reports nothing), then CUDA's cached blocks back to the
    driver. Returns whether it collected."""
    collect = force or device != "cuda"
    if not collect:
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        collect = torch.cuda.memory_allocated() > COLLECT_ABOVE_SHARE * total
    if collect:
        gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return collect


def _scratch_bytes(fn: Callable[[], Any], first_output: Any) -> int:
    """Device memory a warmed-up call allocates beyond its inputs and outputs (O(N^2) scores, say).

    Measured on a second call: the first one also holds autotuners' and compilers' one-off buffers.
    Outputs a call allocates afresh are not scratch; preallocated ones are already in ``before``.
    """
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    output = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    reused = {t.data_ptr() for t in tensors(first_output)}
    fresh = sum(t.numel() * t.element_size() for t in tensors(output) if t.data_ptr() not in reused)
    return max(0, peak - fresh)


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event, default=_jsonable) + "\n")
    sys.stdout.flush()


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


def main() -> None:
    """Entry: ``python -m rooflint.engine.worker``; one JSON job per stdin line, events on stdout.

    Each job ends with a "done" event. The process ends when stdin closes. Jobs with the same
    settings share one Worker (its CUDA context, reference clock and compile caches): a Dask worker
    sends each task group as a job to the same process (engine/measuring.py).
    """
    end_with_parent(watched_parent())
    worker: Worker | None = None
    settings: tuple | None = None
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        tasks = job.pop("tasks")
        key = tuple(sorted((name, json.dumps(value, sort_keys=True)) for name, value in job.items()))
        if worker is None or key != settings:
            worker, settings = _worker_for(job), key
        # Where this worker measures, before any task: a row the parent writes for a task that
        # killed this process carries the same GPU, device and host as the rows measured here.
        emit({"event": "where", "row": json_safe(record_of(worker._stamp(ResultRow(*[""] * 7))))})
        # What the compile caches held before this job's first compile: the run's cold or warm start.
        emit({"event": "clock", "clock": {**worker.clock.take(), "cache_entries": compile_caches.census()}})
        for raw in tasks:
            task = Task(**raw)
            emit({"event": "start", "task": task.key})
            row = worker.run(task)
            # The row's phases travel with it: a process that dies later loses only its last task's.
            emit(
                {
                    "event": "row",
                    "task": task.key,
                    "row": json_safe(record_of(row)),
                    "clock": worker.clock.take(),
                }
            )
        emit({"event": "done"})


def _worker_for(job: dict[str, Any]) -> Worker:
    device = job["device"]
    # The one place a bench's spec is chosen: a CPU run hands over the ceilings its parent measured
    # once (every worker then judges against the same ones); on a GPU each worker reads its own device.
    if job.get("spec"):
        spec = spec_from_dict(job["spec"])
    else:
        spec = current_gpu_spec(job.get("spec_file"), job.get("gpu"), job.get("roof"))
    cache = ReferenceCache() if job.get("reference_cache", True) else None
    return Worker(device, spec, MeasureSettings.from_dict(job["measure"]), reference_cache=cache)


if __name__ == "__main__":
    from rooflint.core.fast_exit import exit_now

    try:
        main()
    except (KeyboardInterrupt, BrokenPipeError):
        # Ctrl-C reaches the whole process group and the parent stops reading: the run was stopped,
        # nothing broke, so worker.log gets no traceback (nor one from flushing the closed stdout).
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        exit_now(130)
    exit_now(0)  # the bench waits for this process to end: without tearing down torch's modules
