"""The measuring child process: ``python -m rooflint.engine.worker``, fed jobs, restarted after a crash.

A crash in a kernel (an illegal address, a hung launch killed by the driver) takes the process and
its CUDA context with it, never the caller: the caller writes a `crashed` row for the task that was
running and starts a fresh process for the rest.

One process can take many jobs, one JSON line each. A Dask worker keeps its process across tasks
(``MeasuringProcess`` held in ``fleet/task.py``): starting one costs 6-10 s on an H200 (torch and
CUDA start-up, the reference clock under load, Inductor's first compile), paid once per task in the
first fleet run, which then took 210 s on two GPUs against 141 s on one (reports/fleet).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from rooflint.core.specs import GpuSpec, spec_to_dict
from rooflint.engine.worker import Task, base_row
from rooflint.outputs.results import CRASHED, ERROR, ResultRow, row_from_record


def worker_env(device_index: int | None) -> dict[str, str]:
    env = dict(os.environ)
    # Never let the current directory shadow the installed package in the child (Python 3.11+).
    env["PYTHONSAFEPATH"] = "1"
    if device_index is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(device_index)
    return env


class MeasuringProcess:
    """One measuring child, started on first use and again after it dies; its stderr goes to ``log_path``."""

    def __init__(self, device_index: int | None, log_path: Path) -> None:
        self.device_index = device_index
        self.log_path = log_path
        self.process: subprocess.Popen[str] | None = None
        self._log: IO[str] | None = None
        self.exit_code: int | None = None

    def jobs(self, job: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Send one job; yield its events up to "done". Ending without "done" means the process died
        (``exit_code`` then says how); the next job starts a new one."""
        if self.process is None or self.process.poll() is not None:
            self._start()
        assert self.process is not None and self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(job) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died between jobs: reading stdout below ends at once and says so
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # a variant printed to stdout; rows only come as JSON events
            if event.get("event") == "done":
                return
            yield event
        self.exit_code = self.process.wait()
        self.close()

    def _start(self) -> None:
        self.close()
        self._log = self.log_path.open("a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rooflint.engine.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=worker_env(self.device_index),
        )

    def close(self) -> None:
        """Closing stdin ends the child after its current job."""
        if self.process is not None:
            for stream in (self.process.stdin, self.process.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None


def run_worker(
    tasks: list[Task],
    *,
    device: str,
    device_index: int | None,
    spec: GpuSpec | None,
    request: Any,
    log_path: Path,
    on_row: Callable[[ResultRow], None],
    process: MeasuringProcess | None = None,
) -> None:
    """Run tasks in a measuring process, restarting it after a crash, until every task has a row.

    ``process``: one kept by the caller across calls (a Dask worker's); else one for this call only.
    ``request`` is the bench's BenchRequest (its measuring settings travel with each job).
    """
    own = process is None
    process = process or MeasuringProcess(device_index, log_path)
    host = socket.gethostname()  # on the rows made here, for a crash or a broken worker
    remaining = list(tasks)
    try:
        while remaining:
            job = {
                "device": device,
                "spec": spec_to_dict(spec) if spec is not None else None,
                "spec_file": request.spec_file,
                "gpu": request.gpu,
                "cuda_graphs": request.cuda_graphs,
                "roof": request.roof,
                "regime": request.regime,
                "throttle_threshold": request.throttle_threshold,
                "throttle_retries": request.throttle_retries,
                "recovery_delay_s": request.recovery_delay_s,
                "tasks": [dataclasses.asdict(t) for t in remaining],
            }
            started: str | None = None
            done: set[str] = set()
            process.exit_code = None
            for event in process.jobs(job):
                if event.get("event") == "start":
                    started = event["task"]
                elif event.get("event") == "row":
                    on_row(row_from_record(event["row"]))
                    done.add(event["task"])
                    started = None
            remaining = [t for t in remaining if t.key not in done]
            if not remaining:
                return
            code, tail = process.exit_code, log_tail(process.log_path)
            if started is None:
                # It died before any task started: its environment is broken, not one variant.
                for task in remaining:
                    message = f"worker failed to start (exit {code}): {tail}"
                    on_row(host_row(task, ERROR, message, host))
                return
            crashed = next(t for t in remaining if t.key == started)
            on_row(host_row(crashed, CRASHED, f"process died (exit {code}): {tail}", host))
            remaining = [t for t in remaining if t.key != started]
    finally:
        if own:
            process.close()


def host_row(task: Task, status: str, message: str, host: str) -> ResultRow:
    """A row the parent writes for a task its worker never finished (no GPU was read for it)."""
    row = base_row(task, task.kind, status, message)
    row.host = host
    return row


def log_tail(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "no output"
