"""bench: expand the request into tasks, run them in worker processes, keep every row on disk."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rooflint.analysis.lint import lint_text
from rooflint.core.errors import UserError
from rooflint.core.family import DTYPES
from rooflint.core.paths import output_dir
from rooflint.core.registry import get_family, resolve_families
from rooflint.core.roofs import DEFAULT_ROOF, ROOF_CHOICES
from rooflint.core.selection import check_variant_names, select_variants
from rooflint.core.specs import GpuSpec, get_spec, spec_from_rows
from rooflint.engine import fleet
from rooflint.engine.measuring import run_worker
from rooflint.engine.worker import Task
from rooflint.outputs.results import FAILING_STATUSES, OK, ResultRow, ResultWriter

# What a bench measures when the user says nothing: bf16, on the GPU when there is one, the large
# size there (it fills an H100 with 4x its L2) and the small one on a CPU (large takes minutes there).
DEFAULT_DTYPES = ("bf16",)
DEFAULT_OUT = Path("rooflint-out")


@dataclass
class BenchRequest:
    """A bench as the user asked for it; ``prepare`` fills every default and checks every field once."""

    families: list[str] = field(default_factory=lambda: ["all"])
    variants: list[str] = field(default_factory=list)  # names or kinds; empty means all
    dtypes: list[str] = field(default_factory=list)  # empty means DEFAULT_DTYPES; ["all"] means every dtype
    size: str | None = None  # None: large on a GPU, small on a CPU
    device: str | None = None  # None: cuda when a GPU is visible
    devices: list[int] = field(default_factory=list)  # GPU indices to shard families over
    scheduler: str | None = None  # a Dask scheduler address, or "local": run as a fleet (engine/fleet)
    gpu_types: list[str] = field(default_factory=list)  # fleet GPU types that each run the whole plan
    spec_file: str | None = None
    gpu: str | None = None
    cuda_graphs: bool = False
    roof: str = DEFAULT_ROOF  # or "measured": the ceilings `rooflint ceilings` stored for this GPU
    out: Path = DEFAULT_OUT
    junit: Path | None = None
    regime: str = "burst"  # or "sustained": back to back after a heat-up (docs/timing.md)
    throttle_threshold: float = 0.90  # median SM clock under this share of the loaded clock: throttled
    throttle_retries: int = 3  # re-timings of a throttled row before it is kept and marked
    recovery_delay_s: float = 2.0  # wait before each re-timing

    def __post_init__(self) -> None:
        from rooflint.engine.timing import REGIMES

        if self.regime not in REGIMES:
            raise UserError(f"unknown regime {self.regime!r}; valid: {', '.join(REGIMES)}")
        if not 0 < self.throttle_threshold <= 1:
            raise UserError(f"--throttle-threshold {self.throttle_threshold} must be in (0, 1], e.g. 0.9")
        if self.throttle_retries < 0:
            raise UserError(f"--throttle-retries {self.throttle_retries} must be 0 or more")
        if not self.recovery_delay_s >= 0:
            raise UserError(f"--recovery-delay {self.recovery_delay_s} must be 0 or more seconds")


@dataclass
class BenchPlan:
    """A checked request with its defaults filled in, and the tasks it expands to."""

    request: BenchRequest
    tasks: list[Task]


@dataclass
class BenchOutcome:
    rows: list[ResultRow]
    written: list[Path]
    csv_path: Path
    interrupted: bool = False

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
    if filled.dtypes in ([], None):
        filled.dtypes = list(DEFAULT_DTYPES)
    elif filled.dtypes == ["all"]:
        filled.dtypes = list(DTYPES)
    filled.size = request.size or ("large" if filled.device == "cuda" else "small")
    if filled.roof not in ROOF_CHOICES:
        raise UserError(f"unknown roof {filled.roof!r}; valid: {', '.join(ROOF_CHOICES)}")
    if filled.gpu is not None:
        get_spec(filled.gpu, filled.spec_file)  # an unknown --gpu is bad input on any device
    fleet.settle(filled)  # --scheduler, --gpu-types; several --devices run as a local fleet
    if filled.devices:
        if filled.device != "cuda":
            raise UserError("--devices picks GPUs; it needs --device cuda and a visible GPU")
        count = torch.cuda.device_count()
        bad = [i for i in filled.devices if i < 0 or i >= count]
        if bad:
            raise UserError(f"--devices: no GPU {bad[0]}; this machine has {count} (valid: 0..{count - 1})")
    return BenchPlan(filled, plan(filled))


def execute(bench: BenchPlan, on_row: Callable[[ResultRow], None] = lambda row: None) -> BenchOutcome:
    """Run a prepared bench: rows reach results.csv as they finish; plots and JUnit follow.

    Ctrl-C stops the run but keeps every row measured so far, on disk and in the outcome.
    """
    request = bench.request
    output_dir(request.out)
    cpu_spec = None
    if request.device == "cpu":
        from rooflint.engine.ceilings import measure_cpu_ceilings

        cpu_spec = measure_cpu_ceilings()
    writer = ResultWriter(request.out)
    interrupted = False
    try:
        run(bench, writer, cpu_spec, on_row)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        writer.close()
    written = write_plots(writer.rows, request.out, request.spec_file, request.roof, cpu_spec)
    if request.junit:
        from rooflint.outputs.junit import write_junit

        write_junit(writer.rows, request.junit)
        written.append(request.junit)
    return BenchOutcome(writer.rows, written, writer.csv_path, interrupted)


def write_plots(
    rows: list[ResultRow], out: Path, spec_file: str | None, roof: str, cpu_spec: GpuSpec | None
) -> list[Path]:
    """One roofline per GPU that measured rows, each drawn on that GPU's own roof.

    A one-GPU run keeps the names roofline.png/.svg/.csv; a run over several GPU types writes
    roofline-<gpu>.* for each.
    """
    import pandas as pd

    from rooflint.core.roofs import measured_overlay, roof_spec
    from rooflint.outputs.plot import plot_roofline
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
        frame = pd.DataFrame([dataclasses.asdict(r) for r in own])
        base = out / ("roofline" if len(gpus) == 1 else f"roofline-{gpu}")
        title = f"rooflint roofline: {spec.name}"
        written += plot_roofline(points_from_results(frame), spec, base, title, measured_overlay(spec))
    return written


def plan(request: BenchRequest) -> list[Task]:  # request as filled in by prepare()
    """Every (family, dtype, shape, variant) to run, validated before anything starts."""
    families = resolve_families(request.families)
    for dtype in request.dtypes:
        if dtype not in DTYPES:
            raise UserError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    loaded = [get_family(name) for name in families]
    check_variant_names(request.variants, loaded)
    tasks = []
    for family in loaded:
        cases = family.cases(request.size)
        for dtype in request.dtypes:
            if dtype not in family.dtypes:
                continue
            for size, params in cases:
                for variant in select_variants(family, request.variants, dtype):
                    tasks.append(Task(family.name, variant.name, dtype, size, params))
    if not tasks:
        raise UserError("nothing to run: no family supports the requested variants and dtypes")
    return tasks


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


def resolve_device(device: str | None) -> str:
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cuda", "cpu"):
        raise UserError(f"unknown device {device!r}; valid: cuda, cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda asked for, but no CUDA GPU is visible; use --device cpu")
    return device


def run(bench: BenchPlan, writer: ResultWriter, spec: GpuSpec | None, on_row: Callable[[ResultRow], None]) -> None:
    """Run the planned tasks; rows reach ``writer`` (and disk) as each one finishes.

    ``spec`` is the CPU's measured spec on a CPU run; on GPUs each worker judges against its own GPU.
    """
    request, tasks = bench.request, bench.tasks

    def record(row: ResultRow) -> None:
        row.lint = lint_text(row, spec)  # spec is None on CUDA: the row's recorded ceilings are used
        writer.append(row)
        on_row(row)

    if request.scheduler:  # a Dask cluster, local or remote: docs/fleet.md
        fleet.run_fleet(bench, record, spec, writer.out_dir)
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
                    log_path=writer.out_dir / f"worker-gpu{index}.log",
                    on_row=locked,
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
        log_path=writer.out_dir / "worker.log",
        on_row=record,
    )
