"""The client side of a fleet: hand out each GPU type's groups, longest first; keep each row as it arrives."""

from __future__ import annotations

import datetime
import math
import queue
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distributed import KilledWorker

from rooflint.core.errors import UserError
from rooflint.core.paths import existing_file
from rooflint.core.registry import get_family
from rooflint.core.specs import GpuSpec
from rooflint.engine.fleet.cluster import describe_workers, open_client
from rooflint.engine.fleet.durations import DurationTable, estimator
from rooflint.engine.fleet.groups import Group, plan_groups
from rooflint.engine.fleet.resources import ANY, choose_labels, gpu_key, offered_labels, task_resources
from rooflint.engine.fleet.task import measure_group
from rooflint.engine.request import BenchPlan
from rooflint.engine.run_clock import RunTally
from rooflint.engine.worker import Task, base_row
from rooflint.outputs.results import ERROR, OK, ResultRow, row_from_record
from rooflint.outputs.run_files import FLEET_LOG, FLEET_WORKERS_LOG

POLL_S = 0.5  # how often the client looks up from its inbox (Ctrl-C is noticed at once regardless)
WORKERS_EVERY_S = 5.0  # how often it re-reads the workers: some join late (Slurm, autoscaling), some leave
NO_WORKER_TIMEOUT_S = 120.0  # a GPU type with work left and no worker this long: its rows become errors
MAX_STARTS = 2  # a task whose worker died under it twice becomes error rows
MAX_SUBMITS = 6  # and one lost this often without ever starting (queued on dying workers) too


def row_key(row: ResultRow) -> str:
    """The row's Task.key (family/variant/dtype/shape): one row per task and GPU type."""
    return f"{row.family}/{row.variant}/{row.dtype}/{row.shape}"


@dataclass
class Submission:
    """One Dask task: a group of tasks on one GPU type, and what the client has heard of it."""

    name: str  # <label>/<family>/<dtype>/<shape>/<variant+variant...>
    label: str
    tasks: list[Task]
    delivered: set[str] = field(default_factory=set)  # row keys already recorded
    workers: list[str] = field(default_factory=list)  # every worker it started on, in order
    submits: int = 0
    abandoned: str = ""  # why the client gave up on it, if it did


class FleetLog:
    """out/fleet.log: what ran where, retries and losses; out/fleet-workers.log: the measuring processes' stderr."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / FLEET_LOG
        self.workers_path = out_dir / FLEET_WORKERS_LOG
        self.path.write_text("")

    def line(self, text: str) -> None:
        stamp = datetime.datetime.now().isoformat(timespec="seconds")
        with self.path.open("a") as handle:
            handle.write(f"{stamp} {text}\n")

    def worker_output(self, submission: Submission, result: dict[str, Any]) -> None:
        if result.get("log"):
            with self.workers_path.open("a") as handle:
                handle.write(f"== {submission.name} on {result['name']} ({result['host']})\n{result['log']}\n")


def run_fleet(
    bench: BenchPlan,
    record: Callable[[ResultRow], None],
    spec: GpuSpec | None,
    out_dir: Path,
    durations: DurationTable | None = None,
    tally: RunTally | None = None,
) -> None:
    """Run a prepared bench on the cluster ``bench.request.scheduler`` names; ``record`` gets each row once.

    Every GPU type chosen (``--gpu-types``, else every type the workers offer) runs the whole plan,
    cut into groups of a few variants and handed out longest first by ``durations`` (default: the
    table in the user cache, which this run then updates). A task whose worker dies runs again, for
    the rows not yet received, on a worker of its type (a live peer before the restarted one); lost
    twice (or failing twice), its rows not yet received become error rows saying why. Ctrl-C (or an
    exception from ``record``) cancels what is still running; every row recorded before stays recorded.
    ``tally`` gets the phase seconds and cache counts each kept row carries, and each Dask worker
    that ran a task, once (engine/run_clock).
    """
    request = bench.request
    log = FleetLog(out_dir)
    with open_client(request) as client:
        workers = describe_workers(client)
        log.line(f"scheduler {client.scheduler.address}: {len(workers)} workers")
        for address, info in sorted(workers.items()):
            log.line(f"  worker {info.get('name', address)} at {address}: resources {info.get('resources') or {}}")
        labels = choose_labels(request.gpu_types, offered_labels(workers), request.spec_file)
        if request.gpu and len(labels) > 1:
            raise UserError(
                f"--gpu {request.gpu} would judge every GPU type as that one; without it each worker "
                f"reads its own GPU (types here: {', '.join(labels)})"
            )
        log.line("GPU types, each running the whole plan: " + ", ".join(label or "(untyped)" for label in labels))
        save = durations is None
        table = DurationTable.load() if durations is None else durations
        FleetRun(client, bench, labels, record, spec, log, table, tally=tally).run()
        if save:
            _save(table, log)


class FleetRun:
    """One bench on a connected cluster.

    The client hands each GPU type at most one task per worker of that type, longest first, and the
    next as one finishes, so a task seldom waits on a worker that is busy and the run does not end
    on one GPU finishing a long group alone. A task whose worker dies comes back as KilledWorker (the
    local scheduler allows no silent re-runs): the client runs its rows not yet received again, on
    a worker of its type (not pinned to an address that may die too), if it had started fewer than
    MAX_STARTS times, counting only the tries that really started, since Dask blames a lost worker on
    every task waiting on it too.

    A case's groups may run on different GPUs of a type, so the client states each row's
    ``speedup_vs_eager`` against the baseline row it recorded for that case and type, and fills in
    the rows that arrived before their baseline when it comes.
    """

    def __init__(
        self,
        client: Any,
        bench: BenchPlan,
        labels: list[str],
        record: Callable[[ResultRow], None],
        spec: GpuSpec | None,
        log: FleetLog,
        durations: DurationTable,
        measure: Callable[..., dict[str, Any]] | None = None,
        tally: RunTally | None = None,
    ) -> None:
        """``measure``: what each task runs on its worker, task.measure_group's signature (tests fake it).
        ``tally``: where the phase reports that come with the rows are added (run_clock)."""
        self.client, self.request, self.labels = client, bench.request, labels
        self.tally = tally if tally is not None else RunTally()
        self.record, self.spec, self.log = record, spec, log
        self.measure = measure or measure_group
        # The --spec-file travels with each task: the workers' machines need not have it.
        spec_file = self.request.spec_file
        self.spec_file_text = existing_file(spec_file, "--spec-file").read_text() if spec_file else None
        self.run_id = uuid.uuid4().hex[:8]
        self.topic = f"rooflint-rows-{self.run_id}"
        self.inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        offered = offered_labels(describe_workers(client))
        self.durations = durations
        self.waiting: dict[str, deque[Group]] = {}
        for label in labels:
            seconds = estimator(durations, table_gpu(label))
            self.waiting[label] = deque(plan_groups(bench.tasks, seconds, len(offered.get(label, [])) or 1))
        self.running: dict[str, tuple[Submission, Any]] = {}  # Dask key -> (submission, future)
        self.by_name: dict[str, Submission] = {}
        self.missing_since: dict[str, float] = {}
        self.observed: dict[str, dict[str, float]] = {}  # table gpu -> row key -> seconds
        self.baselines: dict[tuple[str, str, str, str], float] = {}  # (label, family, dtype, shape) -> median ms
        self.before_baseline: dict[tuple[str, str, str, str], list[ResultRow]] = {}

    def run(self) -> None:
        # Subscribed before anything is submitted: the scheduler forwards row events to subscribers only.
        self.client.subscribe_topic(self.topic, lambda event: self.inbox.put(("event", event[1])))
        try:
            offered = self._top_up()
            total = sum(len(groups) for groups in self.waiting.values()) + len(self.running)
            self.log.line(f"{total} tasks, longest first, one per worker at a time; workers of each type: {offered}")
            checked = time.monotonic()
            while self.running:
                try:
                    kind, item = self.inbox.get(timeout=POLL_S)
                except queue.Empty:
                    kind, item = "", None
                if kind == "event":
                    submission = self.by_name.get(item.get("group", ""))
                    if submission is not None:
                        self._on_event(submission, item)
                elif kind == "done" and item.key in self.running:
                    submission, _ = self.running.pop(item.key)
                    self._on_done(submission, item)
                    self._top_up()
                if time.monotonic() - checked > WORKERS_EVERY_S:
                    checked = time.monotonic()
                    self._watch(self._top_up())
        finally:
            self.client.unsubscribe_topic(self.topic)
            unfinished = [future for _, future in self.running.values() if not future.done()]
            if unfinished:
                self.log.line(f"stopped: cancelling {len(unfinished)} running tasks")
                self.client.cancel(unfinished, force=True)
            for gpu, seconds in self.observed.items():
                self.durations.update(gpu, seconds)

    def _top_up(self) -> dict[str, int]:
        """Submit waiting groups until each GPU type has one task per worker; returns the worker counts."""
        offered = {label: len(names) for label, names in offered_labels(describe_workers(self.client)).items()}
        for label in self.labels:
            busy = sum(1 for submission, _ in self.running.values() if submission.label == label)
            # With no worker of the type right now, one task still waits for the next to join.
            while self.waiting[label] and busy < max(1, offered.get(label, 0)):
                group = self.waiting[label].popleft()
                self._submit(Submission(f"{label or 'any'}/{group.name}", label, list(group.tasks)))
                busy += 1
        return offered

    def _submit(self, submission: Submission) -> None:
        """Submit a group to any worker of its GPU type. After a worker died under it, the
        resubmission is not pinned to the peers alive at that moment: a pin names their addresses,
        and where those peers die too (a crash that takes every worker of a host) the task would wait
        for addresses that never come back. The dead worker's nanny takes a while to restart it, so a
        live peer of the same type is the one free to take it first."""
        submission.submits += 1
        tasks = [task for task in submission.tasks if task.key not in submission.delivered]
        future = self.client.submit(
            self.measure,
            submission.name,
            self.topic,
            tasks,
            device=self.request.device,
            spec=self.spec,
            request=self.request,
            spec_file_text=self.spec_file_text,
            resources=task_resources(submission.label),
            retries=1,  # an exception in the task (a worker that cannot import a family) runs once more
            pure=False,
            key=f"rooflint-{self.run_id}-{submission.name}-{submission.submits}",
        )
        self.running[future.key] = (submission, future)
        self.by_name[submission.name] = submission
        future.add_done_callback(lambda done: self.inbox.put(("done", done)))

    def _watch(self, offered: dict[str, int]) -> None:
        """Give up on a GPU type whose workers are all gone for NO_WORKER_TIMEOUT_S: Dask would wait forever."""
        now = time.monotonic()
        for label in self.labels:
            has_work = self.waiting[label] or any(s.label == label for s, _ in self.running.values())
            if offered.get(label, 0) > 0 or not has_work:
                self.missing_since.pop(label, None)
                continue
            since = self.missing_since.setdefault(label, now)
            if now - since < NO_WORKER_TIMEOUT_S:
                continue
            reason = f"no worker of GPU type {label or '(untyped)'} on the cluster for {NO_WORKER_TIMEOUT_S:.0f} s"
            self.log.line(reason)
            for submission, future in list(self.running.values()):
                if submission.label == label:
                    submission.abandoned = reason
                    self.client.cancel([future], force=True)
            while self.waiting[label]:
                group = self.waiting[label].popleft()
                self._error_rows(Submission(f"{label or 'any'}/{group.name}", label, list(group.tasks)), reason)

    def _on_event(self, submission: Submission, event: dict[str, Any]) -> None:
        if event["kind"] == "start":
            where = f"{event['name']} ({event['host']})"
            if submission.workers:
                before = ", ".join(submission.workers)
                self.log.line(f"{submission.name}: started again on {where} (retry; before on {before})")
            else:
                self.log.line(f"{submission.name}: started on {where}")
            submission.workers.append(event["name"])
            self.tally.worker_started(event["name"])
        elif event["kind"] == "row":
            self._deliver(submission, event["record"], event.get("seconds"), event.get("reports"))

    def _on_done(self, submission: Submission, future: Any) -> None:
        if future.status == "finished":
            result = future.result()
            # Rows whose events were lost or are still on their way arrive here; the others are duplicates.
            seconds, reports = result.get("seconds") or {}, result.get("reports") or {}
            self.tally.worker_started(result["name"])  # its "start" event may have been lost
            for row_record in result["records"]:
                key = row_key(row_from_record(row_record))
                self._deliver(submission, row_record, seconds.get(key), reports.get(key))
            self.tally.add_held(result.get("unsent"))
            self.log.worker_output(submission, result)
            self.log.line(f"{submission.name}: finished on {result['name']} ({result['host']})")
            return
        reason = submission.abandoned
        if not reason:
            try:
                error = future.exception()
            except Exception as other:  # a cancelled future has no exception to give
                error = other
            starts = len(submission.workers)
            lost = isinstance(error, KilledWorker)
            left = [task for task in submission.tasks if task.key not in submission.delivered]
            if lost and not left:
                self.log.line(f"{submission.name}: its worker died after its last row; nothing to run again")
                return
            if lost and starts < MAX_STARTS and submission.submits < MAX_SUBMITS:
                where = f"under it on {submission.workers[-1]}" if starts else "before it started"
                self.log.line(f"{submission.name}: its worker died {where}; {len(left)} rows submitted again")
                self._submit(submission)
                return
            tried = f"started {starts} times" if lost else "failed twice"
            reason = f"lost on the cluster ({tried}): {type(error).__name__}: {_first_line(error)}"
        self.log.line(f"{submission.name}: {reason}")
        self._error_rows(submission, reason)

    def _error_rows(self, submission: Submission, reason: str) -> None:
        for task in submission.tasks:
            if task.key not in submission.delivered:
                submission.delivered.add(task.key)
                row = base_row(task, task.kind, ERROR, reason[:400])
                row.gpu = gpu_key(submission.label, self.request.spec_file)
                self._speedup(submission.label, row)
                self.record(row)

    def _deliver(
        self, submission: Submission, row_record: dict[str, Any], seconds: float | None, reports: Any = None
    ) -> None:
        """Record a row the first time it arrives; ``reports``: the phase reports it carries, tallied
        with the copy kept (the other route's copy carries the same ones)."""
        row = row_from_record(row_record)
        key = row_key(row)
        if key in submission.delivered:
            return  # measured again by a retry, or the same row by both of its routes
        submission.delivered.add(key)
        self.tally.add_held(reports)
        if not row.gpu and submission.label != ANY:
            row.gpu = gpu_key(submission.label, self.request.spec_file)  # a crash row: no GPU was read for it
        if seconds is not None:
            self.observed.setdefault(table_gpu(submission.label), {})[key] = float(seconds)
        self._speedup(submission.label, row)
        self.record(row)

    def _speedup(self, label: str, row: ResultRow) -> None:
        """State the row's speedup against its case's baseline row on this GPU type, as a one-GPU run
        does; a baseline that lands after its case's rows fills theirs in (the writer's rows are these
        objects, and the fleet's results.csv is written again in plan order at the end)."""
        case = (label, row.family, row.dtype, row.shape)
        baseline = get_family(row.family).baseline
        if baseline is None:
            return
        if row.variant == baseline.name:
            if row.status == OK and math.isfinite(row.median_ms) and row.median_ms > 0:
                self.baselines[case] = row.median_ms
                for earlier in self.before_baseline.pop(case, []):
                    earlier.speedup_vs_eager = row.median_ms / earlier.median_ms
            else:
                self.before_baseline.pop(case, None)
            return
        if row.status != OK or not math.isfinite(row.median_ms) or row.median_ms <= 0:
            return
        if case in self.baselines:
            row.speedup_vs_eager = self.baselines[case] / row.median_ms
        else:
            # A speedup the measuring process stated from a baseline it ran earlier may not be against
            # the row kept for the case (a retry measures again): the kept one decides.
            row.speedup_vs_eager = math.nan
            self.before_baseline.setdefault(case, []).append(row)


def table_gpu(label: str) -> str:
    """The duration table's GPU key for a worker label: the label (rooflint's GPU key, best)."""
    return label or "any"


def _save(table: DurationTable, log: FleetLog) -> None:
    try:
        log.line(f"durations of this run kept for the next in {table.save()}")
    except OSError as error:  # a read-only cache costs the next run its order, never this run its rows
        log.line(f"could not keep the durations: {error}")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""
