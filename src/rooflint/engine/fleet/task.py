"""What a Dask worker runs: one task group through bench's own worker process, rows streamed back."""

from __future__ import annotations

import dataclasses
import socket
import tempfile
from pathlib import Path
from typing import Any

from rooflint.core.specs import GpuSpec
from rooflint.engine.worker import Task
from rooflint.outputs.results import ResultRow, json_safe

LOG_TAIL_CHARS = 20_000  # of the measuring processes' stderr, sent back for the client's worker log


def measure_group(
    group: str,
    topic: str,
    tasks: list[Task],
    *,
    device: str,
    spec: GpuSpec | None,
    request: Any,
    spec_file_text: str | None = None,
) -> dict[str, Any]:
    """Run one family x dtype x shape, baseline first, on this worker's GPU.

    ``bench.run_worker`` does the measuring, exactly as in a local run: a child process checks and
    times each variant and is restarted after a crash. Each row is sent to the client under
    ``topic`` as soon as it exists, and all of them again in the result, so a row lost on the way
    still arrives; the client keeps one of each. ``spec_file_text`` is the client's --spec-file,
    which need not exist on this machine.
    """
    from distributed import get_worker

    from rooflint.engine.bench import run_worker

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

    with tempfile.TemporaryDirectory(prefix="rooflint-fleet-") as scratch:
        if spec_file_text is not None:
            spec_file = Path(scratch) / "spec.toml"
            spec_file.write_text(spec_file_text)
            request = dataclasses.replace(request, spec_file=str(spec_file))
        log = Path(scratch) / "worker.log"
        # device_index None: the worker's own CUDA_VISIBLE_DEVICES (set when it started) picks the GPU.
        run_worker(tasks, device=device, device_index=None, spec=spec, request=request, log_path=log, on_row=send)
        text = log.read_text(errors="replace") if log.exists() else ""
    return {"records": records, "log": text[-LOG_TAIL_CHARS:], **me}
