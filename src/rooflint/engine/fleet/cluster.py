"""The Dask cluster a fleet runs on: a local one of this machine's GPUs, or one at an address."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rooflint.core.errors import UserError
from rooflint.engine.fleet.request import LOCAL
from rooflint.engine.fleet.resources import GPU, label_for, type_resource
from rooflint.engine.request import BenchRequest

# No silent re-run of a task whose worker died: the client decides (fleet/client.py), counting only
# the tries that started. A scheduler started by hand takes DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0.
ALLOWED_FAILURES = 0
CONNECT_TIMEOUT_S = 30


@dataclass
class LocalWorker:
    """One worker of a local cluster: one GPU, pinned through CUDA_VISIBLE_DEVICES, and its type
    labels (one for a real GPU; tests give a worker two, to be in two fake types at once)."""

    name: str
    labels: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def resources(self) -> dict[str, float]:
        return {GPU: 1, **{type_resource(label): 1 for label in self.labels}}


def local_workers(request: BenchRequest) -> list[LocalWorker]:
    """One worker per GPU of ``--devices`` (default: every visible GPU); one worker on a CPU run."""
    if request.device != "cuda":
        return [LocalWorker("cpu", ("cpu",))]
    import torch

    indices = request.devices or list(range(torch.cuda.device_count()))
    return [
        LocalWorker(
            f"gpu{index}",
            (label_for(torch.cuda.get_device_name(index), request.gpu, request.spec_file),),
            # Set before the worker process starts, so it and the measuring processes it starts
            # see only their GPU (as device 0); rows still record the physical index.
            {"CUDA_VISIBLE_DEVICES": str(index)},
        )
        for index in indices
    ]


def local_cluster(workers: list[LocalWorker], in_process: bool = False) -> Any:
    """A SpecCluster of one single-threaded Nanny per worker: a task holds its worker's GPU alone,
    and a worker process that dies is restarted by its nanny. ``in_process``: workers in this
    process instead, without their ``env`` (tests of the client's scheduling, in a fraction of a second)."""
    import dask
    from distributed import Nanny, Scheduler, SpecCluster, Worker

    common = {"host": "127.0.0.1", "protocol": "tcp://"}
    scheduler = {"cls": Scheduler, "options": {**common, "port": 0, "dashboard": False, "dashboard_address": ":0"}}

    def options(worker: LocalWorker) -> dict[str, Any]:
        # memory_limit 0: the measuring happens in child processes, not in the worker.
        own = {**common, "nthreads": 1, "resources": worker.resources, "memory_limit": 0, "dashboard": False}
        return own if in_process else {**own, "env": worker.env, "silence_logs": logging.WARNING}

    kind = Worker if in_process else Nanny
    specs = {worker.name: {"cls": kind, "options": options(worker)} for worker in workers}
    # Dask's nanny starts a worker with OMP_NUM_THREADS=1 (MKL's and OpenBLAS's too) and a low
    # MALLOC_TRIM_THRESHOLD_, meant for workers holding data; the measuring processes inherit them, so a
    # CPU row ran on one thread with its large buffers mapped afresh each call (vector_add at 11x a plain
    # bench's time on the same machine). The workers start in this process's environment instead, as a
    # plain bench's measuring process does; a variable the user set there still reaches them.
    settings = {"distributed.scheduler.allowed-failures": ALLOWED_FAILURES, "distributed.nanny.pre-spawn-environ": {}}
    with dask.config.set(settings):
        return SpecCluster(workers=specs, scheduler=scheduler, silence_logs=logging.WARNING, name="rooflint")


@contextmanager
def open_client(request: BenchRequest) -> Iterator[Any]:
    """A connected Client with at least one worker; the local cluster goes away with it."""
    from distributed import Client

    if request.scheduler == LOCAL:
        workers = local_workers(request)
        cluster = local_cluster(workers)
        try:
            with Client(cluster) as client:
                client.wait_for_workers(len(workers), timeout=CONNECT_TIMEOUT_S)
                yield client
        finally:
            stop_measuring()
            cluster.close()
        return
    try:
        client = Client(request.scheduler, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as error:
        raise UserError(f"cannot reach the Dask scheduler at {request.scheduler}: {error}") from None
    with client:
        try:
            client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
        except TimeoutError:
            waited = f"in {CONNECT_TIMEOUT_S} s"
            raise UserError(f"no worker joined the Dask scheduler at {request.scheduler} {waited}") from None
        yield client


def stop_measuring() -> None:
    """Kill the measuring processes still running under this process's local workers (after Ctrl-C):
    closing a worker cannot stop a running task, and its process would go on timing on the GPU."""
    import psutil

    for process in psutil.Process().children(recursive=True):
        try:
            # Matched within each argument: the process starts as `python -c WORKER_BOOT`, whose code
            # names the module, so no argument equals the module's name.
            if any("rooflint.engine.worker" in argument for argument in process.cmdline()):
                process.kill()
        except psutil.Error:
            pass  # already gone


def describe_workers(client: Any) -> dict[str, Any]:
    """The scheduler's view of its workers: address -> {name, host, resources, ...}."""
    return client.scheduler_info(n_workers=-1)["workers"]
