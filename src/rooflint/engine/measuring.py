"""The measuring child process: ``python -m rooflint.engine.worker``, fed jobs, restarted after a crash.

A crash in a kernel (an illegal address, a hung launch killed by the driver) takes the process and
its CUDA context with it, never the caller: the caller writes a `crashed` row for the task that was
running and starts a fresh process for the rest.

One process can take many jobs, one JSON line each. A Dask worker keeps its process across tasks
(``MeasuringProcess`` held in ``fleet/task.py``): starting one pays torch and CUDA start-up, the
reference clock under load and Inductor's first compile, seconds that would otherwise be paid
again for every task.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from rooflint.core.specs import GpuSpec, spec_to_dict
from rooflint.engine.host import host_name
from rooflint.engine.parent_watch import PARENT_PID_VARIABLE
from rooflint.engine.request import BenchRequest
from rooflint.engine.run_clock import RunTally
from rooflint.engine.tasks import Task, base_row
from rooflint.outputs.results import CRASHED, ERROR, ResultRow, record_of, row_from_record

# The measuring process, started so that Ctrl-C ends it the way the default action of SIGINT does:
# at once and silently. A terminal's Ctrl-C reaches the whole process group, and Python's own
# handler would otherwise print a KeyboardInterrupt traceback into worker.log from wherever the
# child was (importing torch takes seconds). The parent reports the interruption. A SIGINT the
# parent ignores (a shell's background job, nohup) stays ignored: else the worker alone would die
# of it, and the row it was measuring would be a crash while the bench went on.
WORKER_BOOT = (
    "import signal; "
    "signal.getsignal(signal.SIGINT) is signal.SIG_IGN or signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "import runpy; runpy.run_module('rooflint.engine.worker', run_name='__main__', alter_sys=True)"
)


def worker_env(device_index: int | None) -> dict[str, str]:
    env = dict(os.environ)
    env[PARENT_PID_VARIABLE] = str(os.getpid())
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
            [sys.executable, "-c", WORKER_BOOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=worker_env(self.device_index),
        )

    def stop(self) -> None:
        """End the child now, mid-job, rather than after its current job as close() lets it."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # the worker keeps SIGTERM's default action: it ends at once, silently
        self.close()

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
    request: BenchRequest,
    log_path: Path,
    on_row: Callable[[ResultRow], None],
    process: MeasuringProcess | None = None,
    tally: RunTally | None = None,
) -> None:
    """Run tasks in a measuring process, restarting it after a crash, until every task has a row.

    ``process``: one kept by the caller across calls (a Dask worker's); else one for this call only.
    ``request``: the bench's; its spec choice and measuring settings travel with each job.
    ``tally``: where the process's phase seconds and cache counts are added (run_clock); the time
    from sending a job to the process's first answer (its start-up, when it had to start) is "startup".
    """
    tally = tally if tally is not None else RunTally()
    tally.worker_started()
    own = process is None
    process = process or MeasuringProcess(device_index, log_path)
    # Where the rows made here (a crash, a broken worker) were run: the worker's own stamp once it
    # has sent one, else what this process can tell without touching the GPU. A crashed row with no
    # GPU would match no row of the run it is compared with, and a crash would pass as "missing".
    where = parent_where(device, device_index, spec, request)
    remaining = list(tasks)
    try:
        while remaining:
            job = {
                "device": device,
                "spec": spec_to_dict(spec) if spec is not None else None,
                "spec_file": request.spec_file,
                "gpu": request.gpu,
                "roof": request.roof,
                "measure": request.measure.to_dict(),
                "reference_cache": request.reference_cache,
                "tasks": [dataclasses.asdict(t) for t in remaining],
            }
            started: str | None = None
            done: set[str] = set()
            process.exit_code = None
            sent = time.perf_counter()
            for event in process.jobs(job):
                if event.get("event") == "start":
                    started = event["task"]
                elif event.get("event") == "where":
                    where = {name: event["row"].get(name) for name in WHERE_FIELDS}
                    tally.add_phase("startup", time.perf_counter() - sent)
                elif event.get("event") == "clock":
                    tally.add(event["clock"])
                elif event.get("event") == "row":
                    row = event.get("row") or {}
                    tally.add(event.get("clock") or {}, family=row.get("family"), variant=row.get("variant"))
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
                    on_row(host_row(task, ERROR, message, where))
                return
            crashed = next(t for t in remaining if t.key == started)
            on_row(host_row(crashed, CRASHED, f"process died (exit {code}): {tail}", where))
            remaining = [t for t in remaining if t.key != started]
    except KeyboardInterrupt:
        # A terminal's Ctrl-C ends the worker too, but a SIGINT or SIGTERM sent to this process alone
        # (kill, a CI job's timeout) would leave it measuring a row nobody keeps, up to close()'s 30 s.
        process.stop()
        raise
    finally:
        if own:
            process.close()


# The columns that say where a row was run: the parent copies them onto the rows it writes itself.
WHERE_FIELDS = (
    "gpu",
    "device_name",
    "device_index",
    "sm_count",
    "l2_bytes",
    "torch_version",
    "triton_version",
    "cuda_version",
    "rooflint_version",
    "git_commit",
    "ceiling_source",
    "host",
)


def host_row(task: Task, status: str, message: str, where: dict[str, Any]) -> ResultRow:
    """A row the parent writes for a task its worker never finished, stamped with where it ran."""
    from rooflint.engine.environment import timestamp

    record = {**record_of(base_row(task, task.kind, status, message)), **where}
    row = row_from_record({name: value for name, value in record.items() if value is not None})
    row.timestamp = timestamp()
    return row


def parent_where(device: str, device_index: int | None, spec: GpuSpec | None, request: BenchRequest) -> dict[str, Any]:
    """Where a worker runs, as this process can tell it without a CUDA context of its own: the CPU's
    measured spec, the GPU named with --gpu, or the GPU's name through NVML."""
    from rooflint import __version__
    from rooflint.core.specs import all_specs, detect, get_spec

    where: dict[str, Any] = {"host": host_name(), "rooflint_version": __version__, "device_index": -1}
    if spec is not None or device != "cuda":  # a CPU run: the ceilings measured at start
        return {**where, "gpu": spec.key if spec is not None else "cpu", "device_name": spec.name if spec else "cpu"}
    where["device_index"] = device_index if device_index is not None else 0
    name = ""
    try:
        from rooflint.engine.nvml import NvmlDevice

        name = NvmlDevice.open(device_index).name()
    except Exception:  # noqa: BLE001 - no NVML here: the row still names the host and the --gpu
        pass
    found = get_spec(request.gpu, request.spec_file) if request.gpu else detect(name, all_specs(request.spec_file))
    return {**where, "device_name": name, "gpu": found.key if found is not None else ""}


def log_tail(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "no output"
