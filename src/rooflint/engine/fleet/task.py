"""What a Dask worker runs: one task group through bench's own worker process, rows streamed back."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooflint.core import paths
from rooflint.core.specs import GpuSpec
from rooflint.engine import compile_caches
from rooflint.engine.host import HOST_VARIABLE, host_name
from rooflint.engine.request import BenchRequest
from rooflint.engine.run_clock import HeldReports
from rooflint.engine.tasks import Task
from rooflint.outputs.results import ResultRow, json_safe, record_of

if TYPE_CHECKING:
    from rooflint.engine.measuring import MeasuringProcess

LOG_TAIL_CHARS = 20_000  # of the measuring processes' stderr, sent back for the client's worker log
# The compilers' caches, each under rooflint's cache root unless set already: every worker of a host
# (and every task of a worker) then finds the kernels another one compiled, and ROOFLINT_CACHE moves
# all of them to a node's local disk at once.
SHARED_CACHES = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor"}


def measure_group(
    group: str,
    topic: str,
    tasks: list[Task],
    *,
    device: str,
    spec: GpuSpec | None,
    request: BenchRequest,
    spec_file_text: str | None = None,
) -> dict[str, Any]:
    """Run some variants of one family x dtype x shape (fleet/groups.py), in plan order, on this worker's GPU.

    ``measuring.run_worker`` does the measuring, exactly as in a local run: a child process checks
    and times each variant and is restarted after a crash. The child stays up between this worker's
    tasks (see ``_process``), so each task pays no start-up again. Each row is sent to the client under
    ``topic`` as soon as it exists, with the seconds since the row before it (the duration table's
    entry, fleet/durations.py), and all of them again in the result, so a row lost on the way still
    arrives; the client keeps one of each. Each row carries the measuring process's phase seconds and
    cache counts reported since the row before it (run_clock.HeldReports), by both routes, so the
    client tallies them once with the row it keeps, as a local run's parent does. ``spec_file_text``
    is the client's --spec-file, which need not exist on this machine.
    """
    from distributed import get_worker

    from rooflint.engine.measuring import run_worker

    share_caches()
    worker = get_worker()
    # "name", not "worker": the scheduler sets an event's "worker" to the worker's address.
    me = {"group": group, "name": str(worker.name), "host": host_name()}
    worker.log_event(topic, {"kind": "start", **me})
    records: list[dict[str, Any]] = []
    seconds: dict[str, float] = {}
    reports: dict[str, list[list[Any]]] = {}  # row key -> the phase reports it carries
    held = HeldReports()
    last = time.monotonic()

    def send(row: ResultRow) -> None:
        nonlocal last
        now = time.monotonic()
        row.host = me["host"] if os.environ.get(HOST_VARIABLE) else row.host or me["host"]
        record = json_safe(record_of(row))
        records.append(record)
        key = f"{row.family}/{row.variant}/{row.dtype}/{row.shape}"
        seconds[key], last = round(now - last, 3), now
        reports[key] = held.take()
        event = {"kind": "row", "record": record, "seconds": seconds[key], "reports": reports[key], **me}
        worker.log_event(topic, event)

    # One task at a time on this worker's GPU, even where a worker was started with --nthreads > 1.
    with _LOCK:
        last = time.monotonic()  # a task waiting for the lock has not started
        process = _process()
        start = process.log_path.stat().st_size if process.log_path.exists() else 0
        if spec_file_text is not None:
            # A path fixed by the content: the same settings each task, so the child keeps its Worker.
            digest = hashlib.sha1(spec_file_text.encode()).hexdigest()[:12]
            spec_file = process.log_path.parent / f"spec-{digest}.toml"
            spec_file.write_text(spec_file_text)
            request = dataclasses.replace(request, spec_file=str(spec_file))
        # device_index None: the worker's own CUDA_VISIBLE_DEVICES (set when it started) picks the GPU.
        run_worker(
            tasks,
            device=device,
            device_index=None,
            spec=spec,
            request=request,
            log_path=process.log_path,
            on_row=send,
            process=process,
            tally=held,
        )
        with process.log_path.open(errors="replace") as handle:  # this task's part of the child's stderr
            handle.seek(start)
            text = handle.read()
    # "unsent": reports no row came after (none where the last task ended in a row, as each does).
    result = {"records": records, "seconds": seconds, "reports": reports, "unsent": held.take()}
    return {**result, "log": text[-LOG_TAIL_CHARS:], **me}


def share_caches() -> None:
    """Point Triton's and Inductor's caches under rooflint's cache root, unless the worker's
    environment chose them (a folder the console entry point pinned is no choice: a local fleet's
    workers inherit it); the measuring processes inherit the setting."""
    for variable, kind in SHARED_CACHES.items():
        if not compile_caches.chosen_by_user(variable):
            os.environ[variable] = str(paths.cache_dir(kind))


_PROCESS: MeasuringProcess | None = None  # this Dask worker process's measuring child
_LOCK = threading.Lock()


def _process() -> MeasuringProcess:
    """The measuring child this Dask worker keeps across tasks; its stderr log outlives each task.

    If the Dask worker dies, the child's stdin closes and it ends after the job in hand."""
    global _PROCESS
    from rooflint.engine.measuring import MeasuringProcess

    if _PROCESS is None:
        log = Path(tempfile.mkdtemp(prefix="rooflint-fleet-worker-")) / "worker.log"
        _PROCESS = MeasuringProcess(None, log)
    return _PROCESS
