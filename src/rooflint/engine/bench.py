"""bench: expand the request into tasks, run them in worker processes, keep every row on disk."""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from rooflint.analysis.lint import lint_text
from rooflint.core.errors import UserError
from rooflint.core.family import DTYPES
from rooflint.core.paths import output_dir
from rooflint.core.registry import get_family, resolve_families
from rooflint.core.selection import check_variant_names, select_dtypes, select_variants
from rooflint.core.specs import GpuSpec, get_spec, spec_from_rows
from rooflint.engine import build_ahead, compile_caches, fleet
from rooflint.engine.ceilings import cpu_ceilings
from rooflint.engine.device import resolve_device
from rooflint.engine.flag_checks import check_flags
from rooflint.engine.measuring import run_worker
from rooflint.engine.request import BenchPlan, BenchRequest
from rooflint.engine.run_clock import RunTally, now_iso, run_record
from rooflint.engine.worker import Task
from rooflint.outputs.folder_lock import FolderLock
from rooflint.outputs.results import COLUMNS, FAILING_STATUSES, OK, ResultRow, ResultWriter, record_of, write_json
from rooflint.outputs.run_files import WORKER_LOG, gpu_worker_log, roofline_file

# What a bench measures when the user says nothing: each family's default dtypes (bf16, or a
# quantized family's own formats: core.selection.select_dtypes), on the GPU when there is one, the
# large size there (it fills an H100 with 4x its L2) and the small one on a CPU (large takes minutes there).


@dataclass
class BenchOutcome:
    rows: list[ResultRow]
    written: list[Path]
    csv_path: Path
    interrupted: bool = False
    run: dict | None = None  # the run record results.json keeps (engine/run_clock.run_record)

    @property
    def exit_code(self) -> int:
        """0: every runnable row measured and passed; 1: any row failed its check or errored; skips don't count."""
        return 1 if any(row.status in FAILING_STATUSES for row in self.rows) else 0


def prepare(request: BenchRequest) -> BenchPlan:
    """Fill the defaults and validate everything (device, GPU indices, roof, GPU name, families,
    variants, dtypes, sizes) before anything runs or any file is written."""
    filled = dataclasses.replace(request)
    # On a remote Dask cluster the workers hold the GPUs: this machine may have none.
    filled.device = fleet.remote_device(request) or resolve_device(request.device)
    if filled.dtypes is None:
        filled.dtypes = []  # each family's defaults (plan)
    elif "all" in filled.dtypes:
        # "all" means every dtype beside other names too (`--dtype all,fp32`, an "all" repeated), as
        # `bench all softmax` runs every family: refused there as "unknown dtype 'all'", a name the
        # --help lists as valid. The names beside it are still checked: `all,fp33` ran every dtype, exit 0.
        _check_dtype_names([name for name in filled.dtypes if name != "all"])
        filled.dtypes = list(DTYPES)
    filled.size = request.size or ("large" if filled.device == "cuda" else "small")
    if filled.device != "cuda" and filled.measure.cuda_graphs:
        # The CPU times every row as usual (the CLI says so): results.json's measure record said
        # cuda_graphs true over rows that no graph replayed.
        filled.measure = dataclasses.replace(filled.measure, cuda_graphs=False)
    check_flags(filled)
    fleet.settle(filled)  # --scheduler, --gpu-types; several --devices run as a local fleet
    if filled.devices:
        if filled.device != "cuda":
            raise UserError("--devices picks GPUs; it needs --device cuda and a visible GPU")
        count = torch.cuda.device_count()
        bad = [i for i in filled.devices if i < 0 or i >= count]
        if bad:
            raise UserError(f"--devices: no GPU {bad[0]}; this machine has {count} (valid: 0..{count - 1})")
    tasks = plan(filled)
    # A remote cluster's workers have their own memory; a local one's are this machine's GPUs (or CPU).
    if filled.scheduler in (None, fleet.LOCAL):
        check_fits(tasks, filled.device, filled.devices)
    return BenchPlan(filled, tasks)


def check_fits(tasks: list[Task], device: str, devices: list[int]) -> None:
    """Refuse a size whose inputs and outputs alone (the cost model's fewest bytes) exceed the
    memory they would be built in: such a row could only run out of memory or crash, after the
    earlier rows had been measured for nothing."""
    available, where = _memory_bytes(device, devices)
    if not available:
        return  # unknown here (no NVML): the worker reports it as oom, as before
    for task in {(t.family, t.dtype, json_key(t.params)): t for t in tasks}.values():
        _refuse_too_big(get_family(task.family), task.dtype, task.params, task.key.split("/", 3)[3], available, where)


def check_shapes_fit(family, dtype: str, cases, device: str) -> None:
    """check_fits for the shapes `ab` and `profile` build in this process: an oversized --size
    there raised the allocator's error (ab) or made an errored row (profile), not bad input's line."""
    from rooflint.core.family import shape_label

    available, where = _memory_bytes(device, [])
    if not available:
        return
    for _, params in cases:
        _refuse_too_big(family, dtype, params, shape_label(params), available, where)


def _refuse_too_big(family, dtype: str, params: dict, label: str, available: float, where: str) -> None:
    try:
        needed = float(family.cost(params, dtype).bytes)
    except Exception:  # noqa: BLE001 - a cost model that cannot price a shape: let the row say so
        return
    if needed > available:
        raise UserError(
            f"size {label} of {family.name} ({dtype}) needs at least "
            f"{needed / 1e9:,.1f} GB for its inputs and outputs, more than {where}'s {available / 1e9:,.1f} GB; "
            "pick a smaller --size"
        )


def _memory_bytes(device: str, devices: list[int]) -> tuple[float, str]:
    """(bytes, what they are) of the memory a bench's inputs live in: this machine's RAM on a CPU;
    the smallest GPU's memory through NVML on CUDA, read without a CUDA context of this process's
    own (the workers must find the GPU free of other processes); 0 where it cannot be read."""
    import os

    if device != "cuda":
        try:
            return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")), "this machine's memory"
        except (ValueError, OSError, AttributeError):
            return 0.0, ""
    try:
        import pynvml

        from rooflint.engine.nvml import NvmlDevice

        sizes = [
            float(pynvml.nvmlDeviceGetMemoryInfo(NvmlDevice.open(index).handle).total) for index in (devices or [None])
        ]
    except Exception:  # noqa: BLE001 - no NVML: the check is skipped, never the bench
        return 0.0, ""
    return min(sizes), "the GPU"


def json_key(params: dict) -> str:
    import json

    return json.dumps(params, sort_keys=True, default=str)


def execute(bench: BenchPlan, on_row: Callable[[ResultRow], None] = lambda row: None) -> BenchOutcome:
    """Run a prepared bench: rows reach results.csv as they finish; plots and JUnit follow.

    Ctrl-C stops the run but keeps every row measured so far, on disk and in the outcome.
    results.json holds the run record too (where the wall time went, the caches' state).
    """
    request = bench.request
    output_dir(request.out)
    started, began, tally = now_iso(), time.perf_counter(), RunTally()

    def record() -> dict:
        wall_s = time.perf_counter() - began
        return {
            **run_record(
                tally, started, now_iso(), wall_s, reference_cache=request.reference_cache, rows=len(writer.rows)
            ),
            # How the rows were measured (regime, CUDA graphs, --max-noise, the throttle policy): what a
            # reader needs to know before comparing this run's n_samples or clocks with another's.
            "measure": request.measure.to_dict(),
        }

    with FolderLock(request.out):  # one bench per folder: two writers would interleave their rows
        keep_previous(request.out)
        writer = ResultWriter(request.out)
        cpu_spec, interrupted = None, False
        try:
            if request.device == "cpu":
                measured = time.perf_counter()
                cpu_spec = cpu_ceilings()
                tally.add_phase("ceilings", time.perf_counter() - measured)
            run(bench, writer, cpu_spec, on_row, tally)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            writer.close(record())  # an interrupted run keeps its record as far as it got
        plotted = time.perf_counter()
        written: list[Path] = []
        # The JUnit file before the plots: stopped while drawing, CI still reads this run's checks,
        # not the file an earlier run left at that path.
        if request.junit:
            from rooflint.outputs.junit import write_junit

            planned = len(bench.tasks) * max(1, len(request.gpu_types))
            write_junit(writer.rows, request.junit, not_run=planned - len(writer.rows) if interrupted else 0)
            written.append(request.junit)
        try:
            if request.plots:
                written[:0] = write_plots(writer.rows, request.out, request.spec_file, request.roof, cpu_spec)
        except KeyboardInterrupt:
            interrupted = True  # every row is on disk: only the plots are left undrawn
        tally.add_phase("plots", time.perf_counter() - plotted)
        final = record()  # the plots and JUnit included
        write_json(writer.rows, writer.out_dir / "results.json", final)
    return BenchOutcome(writer.rows, written, writer.csv_path, interrupted, final)


def keep_previous(out: Path) -> None:
    """The last run's results become results.prev.csv/.json: a run that is cut short, or measures
    nothing, never takes the previous numbers with it. Its rooflines go with them (roofline.prev.png,
    ...), so a run that draws none (--no-plots, or cut short) leaves no plot of other numbers beside
    its results. A results.csv without a row is no run's numbers (one stopped or refused before
    its first row: Ctrl-C at start, an unreachable scheduler): it is removed, never moved over the
    results.prev.* of the last run that measured something."""
    empty = _holds_no_rows(out / "results.csv")
    if not empty and any((out / name).exists() for name in ("results.csv", "results.json")):
        # The last run's results become the .prev pair whole: the run before it's results.prev.json
        # (the last run killed before it wrote its own) must not stay beside its results.prev.csv.
        for name in ("results.prev.csv", "results.prev.json"):
            (out / name).unlink(missing_ok=True)
        # So do the rooflines of the run before it: where the last run drew none (--no-plots, or another
        # GPU's), its roofline.prev.png was kept beside the last run's results.prev.csv, of other numbers.
        for image in out.glob("roofline*"):
            if roofline_file(image.name) == "previous":
                image.unlink()
    for name in ("results.csv", "results.json"):
        current = out / name
        if empty:
            current.unlink(missing_ok=True)
        elif current.exists():
            current.replace(current.with_name(name.replace("results.", "results.prev.")))
    for image in out.glob("roofline*"):
        if roofline_file(image.name) == "current":  # not the .prev ones a run before it kept
            image.replace(image.with_name(f"{image.stem}.prev{image.suffix}"))


def _holds_no_rows(results_csv: Path) -> bool:
    """Whether ``results_csv`` holds rooflint's header (or the start of it, or nothing) and no row, as
    a bench writes it at start. A run stopped between creating the file and writing its header left
    it empty, and the next run moved that over the last measured run's results.prev.csv."""
    try:
        with results_csv.open(errors="replace") as handle:
            lines = list(itertools.islice(filter(None, (line.strip() for line in handle)), 2))
    except OSError:
        return False
    return not lines or (len(lines) == 1 and ",".join(COLUMNS).startswith(lines[0]))


def write_plots(
    rows: list[ResultRow], out: Path, spec_file: str | None, roof: str, cpu_spec: GpuSpec | None
) -> list[Path]:
    """One roofline per GPU that measured rows, each drawn on that GPU's own roof.

    Named by outputs.plot.roofline_base: roofline.png/.svg/.csv for a one-GPU run, roofline-<gpu>.*
    for each GPU type of a run over several.
    """
    import pandas as pd

    from rooflint.core.roofs import measured_overlay, roof_spec
    from rooflint.outputs.plot import plot_roofline, roofline_base
    from rooflint.outputs.points import points_from_results

    measured = [row for row in rows if row.status == OK]
    gpus = sorted({row.gpu for row in measured})
    written: list[Path] = []
    for gpu in gpus:
        own = [r for r in measured if r.gpu == gpu]
        if gpu == "cpu" and cpu_spec is not None:
            spec = cpu_spec
        else:
            try:
                spec = roof_spec(get_spec(gpu, spec_file), roof)
            except UserError:
                # --roof measured with the rows measured elsewhere (a remote fleet's workers): this
                # machine has no ceilings for that GPU, but each row recorded the ones it was judged on.
                spec = spec_from_rows(gpu, own, spec_file)
                if spec is None:
                    raise
        frame = pd.DataFrame([record_of(r) for r in own])
        base = roofline_base(out, gpu, several=len(gpus) > 1)
        title = f"rooflint roofline: {spec.name}"
        written += plot_roofline(points_from_results(frame), spec, base, title, measured_overlay(spec))
    return written


def plan(request: BenchRequest) -> list[Task]:  # request as filled in by prepare()
    """Every (family, dtype, shape, variant) to run, validated before anything starts."""
    # "all" with other names still checks each of them: `bench all nosuch` names nosuch.
    # A name given twice (`bench softmax softmax`, `--dtype bf16,bf16`) is run once: twice, each of
    # its rows would be measured twice and the file would hold two rows of one key.
    named = list(dict.fromkeys(name for name in request.families if name != "all"))
    families = resolve_families(named) if named else []
    if not named or "all" in request.families:
        families = resolve_families(["all"])
    dtypes = list(dict.fromkeys(request.dtypes))
    _check_dtype_names(dtypes)
    loaded = [get_family(name) for name in families]
    check_variant_names(request.variants, loaded)
    tasks = []
    for family in loaded:
        cases = family.cases(request.size)
        for dtype in select_dtypes(family, dtypes):
            for size, params in cases:
                for variant in select_variants(family, request.variants, dtype):
                    tasks.append(Task(family.name, variant.name, dtype, size, params))
    if not tasks and request.variants and not any(select_variants(family, request.variants) for family in loaded):
        # A name valid in some family (or a kind) that none of these families has: the dtype hint
        # below sent the user after the wrong flag.
        subject = ", ".join(family.name for family in loaded) if len(loaded) <= 3 else f"the {len(loaded)} families"
        have = sorted(
            {word for family in loaded for variant in family.variants.values() for word in (variant.name, variant.kind)}
        )
        raise UserError(
            f"nothing to run: {subject} {'has' if len(loaded) == 1 else 'have'} no variant "
            f"{', '.join(request.variants)} (by name or kind); valid here: {', '.join(have)}"
        )
    if not tasks:
        offered = [name for name in DTYPES if any(name in family.dtypes for family in loaded)]
        asked = ", ".join(dtypes) or "each family's defaults"
        raise UserError(
            f"nothing to run: no family supports the requested variants and dtypes ({asked}); "
            f"these families run --dtype {', '.join(offered)}"
        )
    return tasks


def _check_dtype_names(names: list[str]) -> None:
    for dtype in names:
        if dtype not in DTYPES:
            raise UserError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")


def shard(tasks: list[Task], devices: list[int]) -> dict[int, list[Task]]:
    """Families go whole to one device (their eager baseline and reference stay together),
    assigned greedily by task count so the shards finish at about the same time."""
    by_family: dict[str, list[Task]] = {}
    for task in tasks:
        by_family.setdefault(task.family, []).append(task)
    shards: dict[int, list[Task]] = {device: [] for device in devices}
    for family_tasks in sorted(by_family.values(), key=len, reverse=True):
        lightest = min(shards, key=lambda d: len(shards[d]))
        shards[lightest].extend(family_tasks)
    return shards


def run(
    bench: BenchPlan,
    writer: ResultWriter,
    spec: GpuSpec | None,
    on_row: Callable[[ResultRow], None],
    tally: RunTally | None = None,
) -> None:
    """Run the planned tasks; rows reach ``writer`` (and disk) as each one finishes.

    ``spec`` is the CPU's measured spec on a CPU run; on GPUs each worker judges against its own GPU.
    ``tally`` gathers every worker's phase seconds and cache counts (engine/run_clock).
    The nvcc builds the tasks need start first, beside the workers (start_builds).
    """
    tally = tally if tally is not None else RunTally()
    ahead = start_builds(bench, tally)
    interrupted = True
    try:
        _run_tasks(bench, writer, spec, on_row, tally)
        interrupted = False
    finally:
        ahead.close(wait=not interrupted)  # Ctrl-C: the builds not yet started are dropped
        tally.builds_ahead(ahead.built, ahead.seconds)


def start_builds(bench: BenchPlan, tally: RunTally) -> build_ahead.BuildsAhead:
    """Start the nvcc builds the planned variants will load (engine/build_ahead) where the workers
    run on this machine (one GPU, a pool of --devices, a local Dask cluster). The build cache's
    entries are counted first, so the run record still says whether it was warm or cold."""
    request = bench.request
    if request.scheduler and request.scheduler != fleet.LOCAL:
        return build_ahead.BuildsAhead([], [])
    tally.saw_cache("build", compile_caches.census()["build"])
    pairs = [(task.family, task.variant) for task in bench.tasks]
    return build_ahead.start(pairs, request.device, request.devices or [None])


def _run_tasks(
    bench: BenchPlan,
    writer: ResultWriter,
    spec: GpuSpec | None,
    on_row: Callable[[ResultRow], None],
    tally: RunTally,
) -> None:
    request, tasks = bench.request, bench.tasks

    def record(row: ResultRow) -> None:
        row.lint = lint_text(row, spec)  # spec is None on CUDA: the row's recorded ceilings are used
        writer.append(row)
        on_row(row)

    if request.scheduler:  # a Dask cluster, local or remote: docs/fleet.md
        try:
            fleet.run_fleet(bench, record, spec, writer.out_dir, tally=tally)
        finally:  # rows land as they finish on many GPUs; on disk they end in a one-GPU run's order
            writer.reorder(fleet.row_order(tasks))
        return
    # Without Dask, several --devices keep this pool: one worker process per GPU, whole families each.
    if len(request.devices) > 1:  # the CLI admits device lists only for CUDA; tests shard CPU workers
        lock = threading.Lock()

        def locked(row: ResultRow) -> None:
            with lock:
                record(row)

        shards = shard(tasks, request.devices)
        with ThreadPoolExecutor(len(shards)) as pool:
            futures = [
                pool.submit(
                    run_worker,
                    shard_tasks,
                    device=request.device,
                    device_index=index,
                    spec=spec,
                    request=request,
                    log_path=writer.out_dir / gpu_worker_log(index),
                    on_row=locked,
                    tally=tally,
                )
                for index, shard_tasks in shards.items()
                if shard_tasks
            ]
            for future in futures:
                future.result()
        return
    index = request.devices[0] if request.devices else None
    run_worker(
        tasks,
        device=request.device,
        device_index=index,
        spec=spec,
        request=request,
        log_path=writer.out_dir / WORKER_LOG,
        on_row=record,
        tally=tally,
    )
