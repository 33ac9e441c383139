"""bench: expand the request into tasks, run them in worker processes, keep every row on disk."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rooflint.errors import UserError
from rooflint.family import DTYPES, VARIANT_KINDS
from rooflint.lint import lint_text
from rooflint.registry import get_family, resolve_families
from rooflint.results import CRASHED, ERROR, ResultRow, ResultWriter, row_from_record
from rooflint.specs import GpuSpec, spec_to_dict
from rooflint.worker import Task, base_row


@dataclass
class BenchRequest:
    families: list[str]
    variants: list[str] = field(default_factory=list)  # names or kinds; empty means all
    dtypes: list[str] = field(default_factory=lambda: ["bf16"])
    size: str = "small"
    device: str = "cuda"
    devices: list[int] = field(default_factory=list)  # GPU indices to shard families over
    spec_file: str | None = None
    gpu: str | None = None
    cuda_graphs: bool = False
    roof: str = "datasheet"  # or "measured": the ceilings `rooflint ceilings` stored for this GPU


def plan(request: BenchRequest) -> list[Task]:
    """Every (family, dtype, shape, variant) to run, validated before anything starts."""
    families = resolve_families(request.families)
    for dtype in request.dtypes:
        if dtype not in DTYPES:
            raise UserError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    known_variants = set(VARIANT_KINDS)
    loaded = [get_family(name) for name in families]
    for family in loaded:
        known_variants.update(family.variants)
    for name in request.variants:
        if name not in known_variants:
            raise UserError(f"unknown variant {name!r}; valid: {', '.join(sorted(known_variants))}")
    tasks = []
    for family in loaded:
        cases = family.cases(request.size)
        for dtype in request.dtypes:
            if dtype not in family.dtypes:
                continue
            for size, params in cases:
                for variant in family.ordered_variants():
                    if (
                        request.variants
                        and variant.name not in request.variants
                        and variant.kind not in request.variants
                    ):
                        continue
                    if variant.dtypes and dtype not in variant.dtypes:
                        continue
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


def _worker_env(device_index: int | None) -> dict[str, str]:
    env = dict(os.environ)
    if device_index is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(device_index)
    return env


def run_worker(
    tasks: list[Task],
    *,
    device: str,
    device_index: int | None,
    spec: GpuSpec | None,
    request: BenchRequest,
    log_path: Path,
    on_row: Callable[[ResultRow], None],
) -> None:
    """Run tasks in child processes, restarting after a crash, until every task has a row."""
    kinds = {}
    for task in tasks:
        kinds[task.key] = get_family(task.family).variants[task.variant].kind
    remaining = list(tasks)
    while remaining:
        job = {
            "device": device,
            "spec": spec_to_dict(spec) if spec is not None else None,
            "spec_file": request.spec_file,
            "gpu": request.gpu,
            "cuda_graphs": request.cuda_graphs,
            "roof": request.roof,
            "tasks": [dataclasses.asdict(t) for t in remaining],
        }
        with log_path.open("a") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "rooflint.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=_worker_env(device_index),
            )
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps(job))
            process.stdin.close()
            started: str | None = None
            done: set[str] = set()
            for line in process.stdout:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a variant printed to stdout; rows only come as JSON events
                if event.get("event") == "start":
                    started = event["task"]
                elif event.get("event") == "row":
                    on_row(row_from_record(event["row"]))
                    done.add(event["task"])
                    started = None
            code = process.wait()
        remaining = [t for t in remaining if t.key not in done]
        if not remaining:
            return
        tail = _log_tail(log_path)
        if started is None:
            # The worker died before any task started: its environment is broken, not one variant.
            for task in remaining:
                on_row(base_row(task, kinds[task.key], ERROR, f"worker failed to start (exit {code}): {tail}"))
            return
        crashed = next(t for t in remaining if t.key == started)
        on_row(base_row(crashed, kinds[crashed.key], CRASHED, f"process died (exit {code}): {tail}"))
        remaining = [t for t in remaining if t.key != started]


def _log_tail(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "no output"


def resolve_device(device: str | None) -> str:
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cuda", "cpu"):
        raise UserError(f"unknown device {device!r}; valid: cuda, cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda asked for, but no CUDA GPU is visible; use --device cpu")
    return device


def run(request: BenchRequest, writer: ResultWriter, spec: GpuSpec | None, on_row: Callable[[ResultRow], None]) -> None:
    """Run the whole request; rows reach ``writer`` (and disk) as each one finishes."""
    tasks = plan(request)

    def record(row: ResultRow) -> None:
        row.lint = lint_text(row, spec)  # spec is None on CUDA: the row's recorded ceilings are used
        writer.append(row)
        on_row(row)

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
