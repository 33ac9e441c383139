"""Where a bench's wall time goes: seconds per phase, counted in each measuring process and summed
in the parent, and the run record results.json keeps beside the rows.

A measuring process keeps one ``PhaseClock`` and sends what it counted since its last report with
each row (``PhaseClock.take``); the parent adds every report into one ``RunTally`` (several
``--devices`` workers report from their own threads) and turns it into the run record at the end.
In a fleet the measuring process's parent is a Dask worker, on another machine or process than the
bench: a ``HeldReports`` there keeps its reports, each row carries the ones held since the row before
it to the client (engine/fleet/task.py), and the client adds them into the bench's ``RunTally``
(``RunTally.add_held``), counting each Dask worker once by name.

With several workers the phases overlap in time: ``phases_s`` are then GPU-seconds (each worker holds
one device) summed over the workers, and may add up to more than the wall time; the record says so
in ``phase_basis`` and the summary line in words (``run_record``).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

# The phases, in the order the summary names them:
#   startup    start a measuring process: import torch, make the CUDA context, read the clock under load
#   inputs     build a shape's inputs
#   reference  compute (or read from the reference cache) the float64 reference
#   compile    a variant's build and first calls: torch.compile, Triton's JIT and autotuning
#   build      the part of a variant's first calls spent in an nvcc build, or waiting for the one
#              bench started ahead (engine/build_ahead); the builds ahead themselves run beside the
#              workers, and the record keeps their wall time apart (caches.build.ahead_s)
#   check      compare the output with the reference
#   cool       burst's start state (pre-heat, cool-down) and the waits before re-timing a throttled row
#   measure    the timer: warm-up, L2 flushes and the timed samples
# and two in the parent: ceilings (a CPU run measures its roofs first) and plots (rooflines, JUnit).
PHASES = ("measure", "compile", "build", "reference", "cool", "inputs", "startup", "check", "ceilings", "plots")
# The summary always names these; the others only where they took half a second or more.
_ALWAYS = ("measure", "compile", "build", "reference", "cool")
# A variant's first calls: what the run record sums per variant (first_calls_by_variant_s).
FIRST_CALL_PHASES = ("compile", "build")


class PhaseClock:
    """Seconds per phase and event counts in one process, handed over and reset by ``take``."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.counts: dict[str, int] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        began = self._clock()
        try:
            yield
        finally:
            self.add(name, self._clock() - began)

    def add(self, name: str, seconds: float) -> None:
        if name not in self.seconds:
            raise ValueError(f"unknown phase {name!r}; valid: {', '.join(PHASES)}")
        self.seconds[name] += max(0.0, seconds)

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def take(self) -> dict[str, Any]:
        """What was counted since the last take, as plain JSON; the clock starts again from zero."""
        report = {"phases_s": dict(self.seconds), "counts": dict(self.counts)}
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.counts = {}
        return report


class RunTally:
    """The parent's sum of every measuring process's reports; safe to add to from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.phases_s: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.counts: dict[str, int] = {}
        self.workers = 0
        self._names: set[str] = set()  # the fleet's Dask workers counted in workers
        self.first_seen: dict[str, int] = {}  # cache name -> entries it held when the first worker looked
        self.ahead_s = 0.0  # wall seconds of the nvcc builds bench ran ahead, beside the workers
        # family -> phase -> seconds, from the reports that came with a family's rows: which family's
        # compiles, builds or cool-downs a run's time went to, where the run-wide sums cannot say.
        self.by_family: dict[str, dict[str, float]] = {}
        # "family/variant" -> seconds of its first calls (compile and build) over its rows: which
        # variant a warm run's compile time still goes to (torch.compile's tracing, Triton's loads).
        self.first_calls: dict[str, float] = {}

    def add(self, report: dict[str, Any], family: str | None = None, variant: str | None = None) -> None:
        """Add one process's report; ``family`` and ``variant``: those of the row it came with, if any."""
        with self._lock:
            for name, seconds in (report.get("phases_s") or {}).items():
                if name in self.phases_s and isinstance(seconds, (int, float)) and math.isfinite(seconds):
                    seconds = max(0.0, float(seconds))
                    self.phases_s[name] += seconds
                    if family:
                        phases = self.by_family.setdefault(family, dict.fromkeys(PHASES, 0.0))
                        phases[name] += seconds
                        if variant and name in FIRST_CALL_PHASES:
                            key = f"{family}/{variant}"
                            self.first_calls[key] = self.first_calls.get(key, 0.0) + seconds
            for name, n in (report.get("counts") or {}).items():
                self.counts[name] = self.counts.get(name, 0) + int(n)
            for name, n in (report.get("cache_entries") or {}).items():
                self.first_seen.setdefault(name, int(n))

    def add_phase(self, name: str, seconds: float) -> None:
        self.add({"phases_s": {name: seconds}})

    def add_held(self, held: Any) -> None:
        """Add the ``[report, family, variant]`` items a ``HeldReports`` handed over
        (``HeldReports.take``), in order. They crossed a network: anything that is not such an item
        (or a ``[report, family]`` pair) is left out, never raised on, since a row's accounting must
        not cost the run its row."""
        for item in held or ():
            if isinstance(item, (list, tuple)) and len(item) in (2, 3) and isinstance(item[0], dict):
                report, family, variant = (*item, None)[:3]
                self.add(
                    report,
                    family=family if isinstance(family, str) else None,
                    variant=variant if isinstance(variant, str) else None,
                )

    def worker_started(self, name: str | None = None) -> None:
        """One more measuring worker; ``name``: a fleet's Dask worker, counted once however many of
        its tasks (and of their retries) report."""
        with self._lock:
            if name is not None:
                if name in self._names:
                    return
                self._names.add(name)
            self.workers += 1

    def saw_cache(self, name: str, entries: int) -> None:
        """What a cache held before anything of this run added to it (bench's look, before its
        builds ahead start, comes before any worker's)."""
        with self._lock:
            self.first_seen.setdefault(name, int(entries))

    def builds_ahead(self, built: int, seconds: float) -> None:
        """The libraries bench built ahead (engine/build_ahead) and how long that took beside the
        workers. Not a phase: a worker's wait for one of them is its "build" time, and only that
        wait kept a row from being measured."""
        with self._lock:
            self.counts["build_added"] = self.counts.get("build_added", 0) + int(built)
            self.counts["built_ahead"] = self.counts.get("built_ahead", 0) + int(built)
            self.ahead_s += max(0.0, float(seconds))


class HeldReports(RunTally):
    """The tally ``run_worker`` fills on a fleet's Dask worker: it sums nothing, it keeps each report
    (with the family of the row it came with) until ``take`` hands them to a row bound for the client,
    whose ``RunTally.add_held`` adds them where a local run's parent would have added them directly."""

    def __init__(self) -> None:
        super().__init__()
        self._held: list[list[Any]] = []

    def add(self, report: dict[str, Any], family: str | None = None, variant: str | None = None) -> None:
        with self._lock:
            self._held.append([report, family, variant])

    def worker_started(self, name: str | None = None) -> None:
        pass  # a Dask worker runs many tasks: the client counts it once, by name

    def take(self) -> list[list[Any]]:
        """The reports held since the last take, oldest first, as ``[report, family, variant]``."""
        with self._lock:
            held, self._held = self._held, []
        return held


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def cache_report(tally: RunTally, reference_cache: bool) -> dict[str, dict[str, Any]]:
    """Per cache, what the run found in it and added to it, and whether it was warm or cold.

    reference: the float64 references read back (hits), computed and stored (misses), and computed
    again because reading them would take longer (recomputed: cheap references are never stored).
    build, triton, inductor: entries in nvcc's, Triton's and Inductor's on-disk caches when the
    first worker started (the build cache: before bench's builds ahead), and entries the run added
    (each a compile or build that missed); build also says how many of those bench built ahead.
    Such a cache is "unused" where the run added nothing to it and no variant that compiles or
    builds made its first calls (every row skipped, or eager variants only): whatever it held was
    never read, so it was not warm.
    autotune: the autotuners' picks read from rooflint's store (hits) and timed then stored (misses).
    """
    counts = tally.counts
    hits, misses = counts.get("reference_hits", 0), counts.get("reference_misses", 0)
    caches: dict[str, dict[str, Any]] = {
        "reference": {
            "enabled": reference_cache,
            "hits": hits,
            "misses": misses,
            "recomputed": counts.get("reference_recomputed", 0),
            "state": _state(hits, misses) if reference_cache else "off",
        }
    }
    # The counts say what each cache held and gained, not what was read from it: entries held and
    # none added is a warm cache only where a compiling variant's first calls could have read them.
    compiled = counts.get("compiled_first_calls", 0) > 0
    for name in ("build", "triton", "inductor"):
        before, added = tally.first_seen.get(name, 0), counts.get(f"{name}_added", 0)
        state = _state(before, added) if compiled or added else "unused"
        caches[name] = {"entries_before": before, "added": added, "state": state}
    # Autotune picks (kernels/common/autotune_picks.py): read from the store, or timed and stored.
    hits, misses = counts.get("autotune_hits", 0), counts.get("autotune_misses", 0)
    caches["autotune"] = {"hits": hits, "misses": misses, "state": _state(hits, misses)}
    # Of the libraries added, those bench built ahead, and the wall seconds those builds ran.
    caches["build"].update(built_ahead=counts.get("built_ahead", 0), ahead_s=round(tally.ahead_s, 3))
    return caches


def _state(found: int, missed: int) -> str:
    """warm: nothing missed; cold: nothing was there to find; mixed: some of each; unused: neither."""
    if not missed:
        return "warm" if found else "unused"
    return "cold" if not found else "mixed"


def overall_state(caches: dict[str, dict[str, Any]]) -> str:
    states = {cache["state"] for cache in caches.values()} - {"unused", "off"}
    if not states:
        return "unused"
    return states.pop() if len(states) == 1 else "mixed"


def run_record(
    tally: RunTally, started: str, ended: str, wall_s: float, *, reference_cache: bool, rows: int
) -> dict[str, Any]:
    """The ``run`` object of results.json.

    ``phases_s`` are seconds of measuring-process time summed over ``workers`` (each worker holds one
    device: a GPU, or the CPU of a CPU run), plus the parent's own ceilings and plots, counted once.
    ``other_s`` is the rest of ``wall_s`` times the workers, never below zero (the parent's other work:
    planning, starting a fleet's cluster; Python between phases; a worker idle while another finishes
    or waiting for its next fleet task). ``phase_basis`` says how to read them:

    - ``wall``: one worker; the phases and ``other_s`` add up to ``wall_s``.
    - ``gpu_seconds``: several workers (a fleet, or ``--devices``) measured at the same time, so the
      phases are GPU-seconds that overlap in time and may sum to more than ``wall_s``; they and
      ``other_s`` add up to ``wall_s * workers`` (a fleet counts each Dask worker that ran a task,
      from the start of the run, so one that joined late leaves its absence in ``other_s``).
    """
    workers = max(1, tally.workers)
    phases = {name: round(seconds, 3) for name, seconds in tally.phases_s.items()}
    caches = cache_report(tally, reference_cache)
    return {
        "start": started,
        "end": ended,
        "wall_s": round(wall_s, 3),
        "workers": workers,
        "phase_basis": "wall" if workers == 1 else "gpu_seconds",
        "rows": rows,
        "phases_s": phases,
        "other_s": round(max(0.0, wall_s * workers - sum(tally.phases_s.values())), 3),
        "caches": caches,
        "cache_state": overall_state(caches),
        # Per family, the phases its rows' reports carried (a process's start and its CPU-ceiling
        # measurement come with no row, so these add up to a little less than phases_s).
        "phases_by_family_s": {
            family: {name: round(seconds, 3) for name, seconds in phases.items() if seconds > 0}
            for family, phases in sorted(tally.by_family.items())
        },
        # Per family/variant, its first calls' seconds (compile and build) over its rows, longest first
        # (those under a millisecond left out: skipped rows, eager calls). The first torch.compile
        # variant of a process also carries Inductor's own start-up.
        "first_calls_by_variant_s": {
            key: round(seconds, 3)
            for key, seconds in sorted(tally.first_calls.items(), key=lambda item: (-item[1], item[0]))
            if round(seconds, 3) > 0
        },
    }


def summary_line(record: dict[str, Any]) -> str:
    """One line: the wall time and where it went, e.g. ``wall 312 s: measure 41 s, compile 150 s,
    ..., reference 12 s (cache: 180 hits, 3 misses), other 59 s; caches warm``. With several workers
    it says the phases are GPU-seconds summed over them (``wall 368 s, phases in GPU-seconds over 2
    workers: measure 390 s, ...``), which may add up to more than the wall."""
    phases = record["phases_s"]
    reference = record["caches"]["reference"]
    first_calls = record.get("first_calls_by_variant_s") or {}
    parts = []
    for name in PHASES:
        if name not in _ALWAYS and phases.get(name, 0.0) < 0.5:
            continue
        part = f"{name} {phases.get(name, 0.0):.0f} s"
        if name == "build" and first_calls:  # compile and build stand side by side in PHASES
            # A variant's first calls are its compile and build seconds together: named after both
            # phases, as what it counts, and only where they come to a second or more.
            longest, seconds = next(iter(first_calls.items()))  # the record keeps them longest first
            if round(seconds) >= 1:
                part += f" (most of compile and build: {longest} {seconds:.0f} s)"
        if name == "reference":
            recomputed = f", {reference['recomputed']} cheaper to recompute" if reference["recomputed"] else ""
            part += (
                f" (cache: {reference['hits']} hits, {reference['misses']} misses{recomputed})"
                if reference["enabled"]
                else " (cache off)"
            )
        parts.append(part)
    parts.append(f"other {record['other_s']:.0f} s")
    basis = f", phases in GPU-seconds over {record['workers']} workers" if record["workers"] > 1 else ""
    return f"wall {record['wall_s']:.0f} s{basis}: " + ", ".join(parts) + f"; caches {record['cache_state']}"
