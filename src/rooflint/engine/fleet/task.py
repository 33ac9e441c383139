"""What a Dask worker runs: one task group through bench's own worker process, rows streamed back."""

from __future__ import annotations

import dataclasses
import hashlib
import socket
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooflint.core.specs import GpuSpec
from rooflint.engine.request import BenchRequest
from rooflint.engine.worker import Task
from rooflint.outputs.results import ResultRow, json_safe

if TYPE_CHECKING:
    from rooflint.engine.measuring import MeasuringProcess

LOG_TAIL_CHARS = 20_000  # of the measuring processes' stderr, sent back for the client's worker log


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
    """Run one family x dtype x shape, baseline first, on this worker's GPU.

    ``measuring.run_worker`` does the measuring, exactly as in a local run: a child process checks
    and times each variant and is restarted after a crash. The child stays up between this worker's
    tasks (see ``_process``), so each task pays no start-up again. Each row is sent to the client under
    ``topic`` as soon as it exists, and all of them again in the result, so a row lost on the way
    still arrives; the client keeps one of each. ``spec_file_text`` is the client's --spec-file,
    which need not exist on this machine.
    """
    from distributed import get_worker

    from rooflint.engine.measuring import run_worker

    worker = get_worker()
    # "name", not "worker": the scheduler sets an event's "worker" to the worker's address.
    me = {"group": group, "name": str(worker.name), "host": socket.gethostname()}
    worker.log_event(topic, {"kind": "start", **me})
    records: list[dict[str, Any]] = []

    def send(row: ResultRow) -> None:
        row.host = row.host or me["host"]
        record = json_safe(dataclasses.asdict(row))
        records.append(record)
        worker.log_event(topic, {"kind": "row", "record": record, **me})

    # One task at a time on this worker's GPU, even where a worker was started with --nthreads > 1.
    with _LOCK:
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
        )
        with process.log_path.open(errors="replace") as handle:  # this task's part of the child's stderr
            handle.seek(start)
            text = handle.read()
    return {"records": records, "log": text[-LOG_TAIL_CHARS:], **me}


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
