"""Attribute a profiled step's time to the model's ops.

The forward wraps each op in a record_function range (OpRecorder). On a GPU, torch.profiler (Kineto
with CUPTI) records every kernel, memcpy and memset with the correlation id of its launch; the
launch's CPU timestamp falls inside exactly one op range, whatever issued it: an aten op, a Triton
launcher or a ctypes call into a rooflint .so. The kernel's device time goes to that op. A kernel
launched inside the step but outside every op range is "unattributed".

On a CPU there are no kernels: an op's time is the wall time of its ranges, and an aten op that
runs in the step outside every range is unattributed. Unattributed work is named as well as timed.

What is neither an op's nor unattributed is idle: on a GPU the gaps between kernels (launch-bound
stretches), on a CPU the Python between op ranges.

Kernels launched with programmatic dependent launch (kernels/common/pdl.py) overlap: a decode GEMM
starts while the kernel before it runs, loads its weights and waits. A kernel's time is then what
it adds to the step, its end less the later of its start and every earlier kernel's end; without
overlap that is its duration. The ops' times still sum to the GPU's busy time, never above it.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from rooflint.engine.kineto_log import without_usdt_lines
from rooflint.models.base import RANGE_PREFIX, STEP_RANGE

UNATTRIBUTED = "unattributed"
# Kineto activity types that are GPU work; others on the device (annotations, cuda_sync) are not.
WORK_ACTIVITIES = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass
class OpTime:
    ms: float = 0.0
    calls: int = 0
    kernels: Counter = field(default_factory=Counter)  # kernel (GPU) or aten op (CPU) name -> ms

    def top_kernel(self) -> tuple[str, float]:
        """The kernel with the most time in this op and its share of the op's time."""
        if not self.kernels or self.ms <= 0:
            return "", 0.0
        name, ms = self.kernels.most_common(1)[0]
        return name, ms / self.ms


@dataclass
class Attribution:
    ops: dict[str, OpTime]
    unattributed_ms: float  # kernels (GPU) or aten ops (CPU) of the step outside every op range
    span_ms: float  # CPU: the step range's wall time; GPU: first kernel start to last kernel end
    mode: str  # "device kernels" | "cpu ranges"
    # The unattributed time by kernel (GPU) or top-level aten op (CPU) name -> ms. A name here is
    # work the forward runs outside every op range, however short: its share of the step's time
    # depends on the machine's load, the name does not.
    unattributed_kernels: Counter = field(default_factory=Counter)

    @property
    def attributed_ms(self) -> float:
        return sum(op.ms for op in self.ops.values())

    @property
    def total_ms(self) -> float:
        """The work of the step: what the ops' times and the unattributed rest add up to."""
        return self.attributed_ms + self.unattributed_ms

    @property
    def idle_ms(self) -> float:
        """The span's time that is no work: GPU gaps between kernels, or Python between CPU op ranges."""
        return self.span_ms - self.total_ms


PERSISTENT_OP = "decoder_layers"  # the range of a kernel that runs several ops as phases


def split_phases(attribution: Attribution, shares: dict[str, tuple[float, int]] | None) -> Attribution:
    """Split the persistent kernel's op into its phases' ops, each its ``(share, calls)`` of the
    time (measured inside the kernel: models/ops/decode_layers.py). Without shares it stays whole."""
    whole = attribution.ops.get(PERSISTENT_OP)
    if whole is None or not shares:
        return attribution
    del attribution.ops[PERSISTENT_OP]
    for name, (share, calls) in shares.items():
        op = attribution.ops.setdefault(name, OpTime())
        op.ms += whole.ms * share
        op.calls += calls
        for kernel, ms in whole.kernels.items():
            op.kernels[kernel] += ms * share
    return attribution


def profile_step(fn: Callable[[], Any], device: torch.device, replay: Callable[[], Any] | None = None) -> Attribution:
    """Run ``fn`` once under torch.profiler (op ranges must be enabled) and attribute its time.

    ``replay`` replays the same step from its CUDA graph: the step that is timed. Its kernels carry
    no op ranges, but they are the op-by-op step's kernels in the same order; where the two
    sequences match, each replayed kernel takes the op of its op-by-op twin and the times are the
    replay's. That matters under programmatic dependent launch, where a kernel's weight stream
    overlaps the kernels before it in the graph but not in a step launched op by op."""
    cuda = device.type == "cuda"
    events = _profile(fn, cuda, record=True)
    if not cuda:
        return attribute_cpu(events)
    if replay is not None:
        replayed = attribute_replay(events, _profile(replay, cuda, record=False))
        if replayed is not None:
            return replayed
    return attribute_device(events)


def _profile(fn: Callable[[], Any], cuda: bool, record: bool) -> list[_Event]:
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()
    with without_usdt_lines(), profile(activities=activities) as prof:
        if record:
            with record_function(STEP_RANGE):
                fn()
        else:
            fn()
        if cuda:
            torch.cuda.synchronize()
    return [_Event.of(e) for e in prof.profiler.kineto_results.events()]


@dataclass(frozen=True)
class _Event:
    name: str
    on_cpu: bool
    start_ns: int
    end_ns: int
    correlation: int
    linked: int
    annotation: bool
    activity: str

    @classmethod
    def of(cls, event) -> _Event:
        activity = str(event.activity_type()) if hasattr(event, "activity_type") else ""
        return cls(
            name=event.name(),
            on_cpu=event.device_type() == torch.autograd.DeviceType.CPU,
            start_ns=event.start_ns(),
            end_ns=event.end_ns(),
            correlation=event.correlation_id(),
            linked=event.linked_correlation_id(),
            annotation=bool(event.is_user_annotation()) or "annotation" in activity,
            activity=activity,
        )


def _is_range(event: _Event) -> bool:
    return event.name.startswith(RANGE_PREFIX) or event.name == STEP_RANGE


class _Ranges:
    """The op ranges of one step, sorted, for 'which op was running at time t'."""

    def __init__(self, events: list[_Event]) -> None:
        steps = [e for e in events if e.on_cpu and e.name == STEP_RANGE]
        if not steps:
            raise RuntimeError("the profile has no step range: was the step run inside profile_step?")
        self.step = steps[0]
        # By name: a record_function range is a user annotation, torch's faster C++ range an op.
        ranges = sorted((e for e in events if e.on_cpu and e.name.startswith(RANGE_PREFIX)), key=lambda e: e.start_ns)
        self.ranges = ranges
        self.starts = [e.start_ns for e in ranges]

    def op_at(self, t_ns: int) -> str | None:
        """The op whose range holds time t (ranges do not nest), or None."""
        index = bisect.bisect_right(self.starts, t_ns) - 1
        if index >= 0 and t_ns <= self.ranges[index].end_ns:
            return self.ranges[index].name[len(RANGE_PREFIX) :]
        return None

    def in_step(self, t_ns: int) -> bool:
        return self.step.start_ns <= t_ns <= self.step.end_ns

    def calls(self) -> Counter:
        return Counter(e.name[len(RANGE_PREFIX) :] for e in self.ranges)


def attribute_cpu(events: list[_Event]) -> Attribution:
    ranges = _Ranges(events)
    ops: dict[str, OpTime] = {}
    for event in ranges.ranges:
        op = ops.setdefault(event.name[len(RANGE_PREFIX) :], OpTime())
        op.ms += (event.end_ns - event.start_ns) / 1e6
        op.calls += 1
    # Name each op's heaviest aten ops: the top-level ones (not inside another aten op) in its ranges.
    aten = sorted(
        (e for e in events if e.on_cpu and not e.annotation and not _is_range(e)), key=lambda e: (e.start_ns, -e.end_ns)
    )
    outer_end = -1
    unattributed: Counter = Counter()
    for event in aten:
        if event.start_ns < outer_end or not ranges.in_step(event.start_ns):
            continue  # nested in the previous top-level op, or not this step's
        outer_end = event.end_ns
        name = ranges.op_at(event.start_ns)
        ms = (event.end_ns - event.start_ns) / 1e6
        if name is not None:
            ops[name].kernels[event.name] += ms
        else:
            unattributed[event.name] += ms
    span = (ranges.step.end_ns - ranges.step.start_ns) / 1e6
    return Attribution(ops, sum(unattributed.values(), 0.0), span, "cpu ranges", unattributed)


def _is_work(event: _Event) -> bool:
    return not (event.on_cpu or event.annotation or (event.activity and event.activity not in WORK_ACTIVITIES))


def attribute_device(events: list[_Event]) -> Attribution:
    ranges = _Ranges(events)
    return _exclusive(_step_work(events, ranges), {name: OpTime(calls=calls) for name, calls in ranges.calls().items()},
                      "device kernels")  # fmt: skip


def attribute_replay(events: list[_Event], replay: list[_Event]) -> Attribution | None:
    """The replayed graph's kernels, each given the op of the op-by-op step's kernel at the same
    place in the sequence; None where the two sequences differ (then the op-by-op step counts)."""
    ranges = _Ranges(events)
    work = _step_work(events, ranges)
    replayed = sorted((e for e in replay if _is_work(e)), key=lambda e: (e.start_ns, e.end_ns))
    if [e.name for e, _ in work] != [e.name for e in replayed]:
        return None
    ops = {name: OpTime(calls=calls) for name, calls in ranges.calls().items()}
    return _exclusive([(e, name) for e, (_, name) in zip(replayed, work)], ops, "graph replay kernels")


def _step_work(events: list[_Event], ranges: _Ranges) -> list[tuple[_Event, str | None]]:
    """(GPU work event, the op that launched it) for the step's kernels, memcpys and memsets, by start."""

    # A kernel's linked correlation id is the id of the innermost torch event on the stack at its
    # launch (an aten op, or an op range for Triton and ctypes launches); failing that, its own
    # correlation id names the CUDA runtime/driver launch call. Two id spaces: kept in two maps.
    def is_launch_call(e: _Event) -> bool:
        return "runtime" in e.activity or "driver" in e.activity

    runtime_events = {e.correlation: e.start_ns for e in events if e.on_cpu and is_launch_call(e)}
    # Op ranges are torch events too: a Triton or ctypes launch inside one links to the range itself.
    torch_events = {e.correlation: e.start_ns for e in events if e.on_cpu and not is_launch_call(e)}
    work = []
    for event in events:
        if not _is_work(event):
            continue
        launch = torch_events.get(event.linked) if event.linked else None
        if launch is None:
            launch = runtime_events.get(event.correlation)
        if launch is None or not ranges.in_step(launch):
            continue  # not launched by this step (profiler start-up, the final synchronize)
        work.append((event, ranges.op_at(launch)))
    work.sort(key=lambda item: (item[0].start_ns, item[0].end_ns))
    return work


def _exclusive(work: list[tuple[_Event, str | None]], ops: dict[str, OpTime], mode: str) -> Attribution:
    """Each work event's time that no earlier one covers, summed per op (the module's docstring)."""
    unattributed = OpTime()
    frontier = None  # the latest end so far: time before it is an earlier kernel's
    for event, name in work:
        begin = event.start_ns if frontier is None else max(event.start_ns, frontier)
        ms = max(event.end_ns - begin, 0) / 1e6
        frontier = event.end_ns if frontier is None else max(frontier, event.end_ns)
        target = ops.setdefault(name, OpTime()) if name is not None else unattributed
        target.ms += ms
        target.kernels[event.name] += ms
    span = (frontier - work[0][0].start_ns) / 1e6 if work else 0.0
    return Attribution(ops, unattributed.ms, span, mode, unattributed.kernels)
