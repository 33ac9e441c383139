"""Why a kernel falls short of its roof, from Nsight Compute's counters.

A roofline says how far a kernel is from its roof; these counters say what holds it there. Three
questions, in the order Nsight Compute's own "speed of light" analysis asks them:

1. Is one unit near its peak? DRAM throughput, the tensor pipe, the warp schedulers' issue slots,
   or the busiest other SM unit (``sm__throughput`` is the maximum over the SM's units). A unit at
   80% of its sustained peak is the limit: making anything else faster cannot help.
2. If none is, the kernel is latency-bound: warps wait, and the schedulers have too few ready
   warps to hide it. The stall reasons (cycles each issued instruction spent waiting, by reason)
   say on what: ``long_scoreboard`` is global memory, ``barrier`` a block barrier, ``wait`` a fixed
   latency (an mbarrier poll, a dependent instruction), ``math_pipe_throttle`` a busy pipe.
3. And how many warps were there to hide it: registers, block size, shared memory and the
   achieved occupancy.

Every metric is looked up in ``ncu --query-metrics`` first: the names differ between GPU
architectures, and ncu rejects a run that asks for one it does not know.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

STALL_REASONS = (
    "long_scoreboard",
    "short_scoreboard",
    "barrier",
    "wait",
    "mio_throttle",
    "lg_throttle",
    "math_pipe_throttle",
    "tex_throttle",
    "not_selected",
    "dispatch_stall",
    "no_instruction",
    "membar",
    "branch_resolving",
    "drain",
    "sleeping",
    "imc_miss",
    "misc",
)


def stall_metric(reason: str) -> str:
    """Cycles a warp spent stalled on ``reason`` per instruction issued (they sum to the cycles per issue)."""
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


DURATION = "gpu__time_duration.sum"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
ISSUE_PCT = "smsp__issue_active.avg.pct_of_peak_sustained_active"
OCCUPANCY_PCT = "sm__warps_active.avg.pct_of_peak_sustained_active"
INSTRUCTIONS = "smsp__inst_executed.sum"
CYCLES_PER_ISSUE = "smsp__average_warps_active_per_issue_active.ratio"
REGISTERS = "launch__registers_per_thread"
BLOCK = "launch__block_size"
GRID = "launch__grid_size"
SMEM_DYNAMIC = "launch__shared_mem_per_block_dynamic"
SMEM_STATIC = "launch__shared_mem_per_block_static"
# The MUFU (exp2, rsqrt) pipe: a softmax's exponentials can hold a kernel that no other unit does.
XU_PCT = "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"
FIXED_METRICS = (
    DURATION,
    DRAM_PCT,
    SM_PCT,
    ISSUE_PCT,
    OCCUPANCY_PCT,
    INSTRUCTIONS,
    CYCLES_PER_ISSUE,
    REGISTERS,
    BLOCK,
    GRID,
    SMEM_DYNAMIC,
    SMEM_STATIC,
    XU_PCT,
)
TENSOR_PIPE_SUFFIX = ".avg.pct_of_peak_sustained_active"

BOUND_PCT = 80.0  # a unit this busy is the limit (Nsight Compute's guidance for its SOL breakdown)
NEAR_PCT = 60.0  # below this on every unit, the kernel is latency-bound
TOP_STALLS = 3


def _base(metric: str) -> str:
    return metric.split(".", 1)[0]


def tensor_pipe_metrics(available: list[str]) -> list[str]:
    """The tensor pipes' active-cycle counters this GPU has (hmma on Ampere, gmma beside it on Hopper)."""
    return sorted(
        f"{name}{TENSOR_PIPE_SUFFIX}"
        for name in set(available)
        if name.startswith("sm__pipe_tensor") and name.endswith("_cycles_active") and "." not in name
    )


def why_metrics(available: list[str]) -> list[str]:
    """The counters that explain a limiter, those of them this ncu offers for this GPU.

    The launch__ attributes are recorded for every kernel on every architecture, and
    ``--query-metrics`` (which lists the hardware's counters) does not name them.
    """
    known = set(available)
    wanted = [*FIXED_METRICS, *(stall_metric(reason) for reason in STALL_REASONS)]
    chosen = [m for m in wanted if m.startswith("launch__") or _base(m) in known]
    return chosen + tensor_pipe_metrics(available)


@dataclass
class Why:
    main_kernel: str  # the kernel that took most of the range's time: its counters explain the variant
    main_kernel_share_pct: float
    dram_pct: float
    sm_pct: float
    issue_pct: float
    tensor_pipe_pct: float
    xu_pct: float
    occupancy_pct: float
    registers: float
    block: float
    grid: float
    smem_bytes: float
    instructions: float
    cycles_per_issue: float
    stalls: list[tuple[str, float]]  # (reason, cycles per issued instruction), largest first
    limiter: str

    @property
    def top_stalls(self) -> str:
        return ", ".join(f"{reason} {cycles:.2f}" for reason, cycles in self.stalls[:TOP_STALLS])


def _value(values: dict[str, float], metric: str) -> float:
    value = values.get(metric, math.nan)
    return value if math.isfinite(value) else math.nan


def _pct(value: float) -> str:
    return f"{value:.0f}%"


def verdict(units: dict[str, float], stalls: list[tuple[str, float]], occupancy_pct: float) -> str:
    """One line: the unit at its limit, or what the warps wait on when none is."""
    measured = {name: pct for name, pct in units.items() if math.isfinite(pct)}
    if not measured:
        return "unknown: ncu reported no throughput counters"
    unit, pct = max(measured.items(), key=lambda item: item[1])
    waits = ""
    if stalls:
        reason, cycles = stalls[0]
        waits = f"; warps wait most on {reason} ({cycles:.2f} cycles an instruction)"
    occupancy = f", occupancy {_pct(occupancy_pct)}" if math.isfinite(occupancy_pct) else ""
    if pct >= BOUND_PCT:
        return f"{unit} bound ({_pct(pct)} of peak)"
    if pct >= NEAR_PCT:
        return f"{unit} at {_pct(pct)} of peak, short of its limit{waits}{occupancy}"
    return f"latency: no unit above {NEAR_PCT:.0f}% (busiest {unit} {_pct(pct)}){waits}{occupancy}"


def explain(kernels) -> Why | None:
    """The limiter of a variant's range of kernels (``ncu.KernelCounters``): its longest kernel's.

    A fused variant is one kernel; an unfused chain's longest kernel is where its time goes, and
    ``main_kernel_share_pct`` says how much of it.
    """
    timed = [k for k in kernels if math.isfinite(_value(k.values, DURATION))]
    if not timed:
        return None
    total = sum(k.values[DURATION] for k in timed)
    main = max(timed, key=lambda k: k.values[DURATION])
    v = main.values
    tensor = [_value(v, m) for m in v if m.startswith("sm__pipe_tensor") and m.endswith(TENSOR_PIPE_SUFFIX)]
    tensor = [t for t in tensor if math.isfinite(t)]
    tensor_pct = max(tensor) if tensor else math.nan
    stalls = [(reason, _value(v, stall_metric(reason))) for reason in STALL_REASONS]
    stalls = sorted(((r, c) for r, c in stalls if c > 0), key=lambda item: -item[1])  # NaN > 0 is False
    smem = sum(x for x in (_value(v, SMEM_DYNAMIC), _value(v, SMEM_STATIC)) if math.isfinite(x))
    units = {
        "DRAM": _value(v, DRAM_PCT),
        "tensor pipe": tensor_pct,
        "issue": _value(v, ISSUE_PCT),
        "MUFU (XU)": _value(v, XU_PCT),
    }
    # sm__throughput is the busiest SM unit's share; name it only when no named unit explains it.
    sm_pct = _value(v, SM_PCT)
    named = max((p for p in units.values() if math.isfinite(p)), default=-math.inf)
    if math.isfinite(sm_pct) and sm_pct > named + 5.0:
        units["SM (its busiest unit)"] = sm_pct
    occupancy = _value(v, OCCUPANCY_PCT)
    return Why(
        main_kernel=main.name,
        main_kernel_share_pct=100.0 * main.values[DURATION] / total if total else math.nan,
        dram_pct=units["DRAM"],
        sm_pct=sm_pct,
        issue_pct=units["issue"],
        tensor_pipe_pct=tensor_pct,
        xu_pct=units["MUFU (XU)"],
        occupancy_pct=occupancy,
        registers=_value(v, REGISTERS),
        block=_value(v, BLOCK),
        grid=_value(v, GRID),
        smem_bytes=smem if smem else math.nan,
        instructions=_value(v, INSTRUCTIONS),
        cycles_per_issue=_value(v, CYCLES_PER_ISSUE),
        stalls=stalls,
        limiter=verdict(units, stalls, occupancy),
    )


UNTIMED = "unknown: no kernel was timed"


def columns(why: Why | None) -> dict[str, object]:
    """A profile row's limiter columns (engine/profile.NcuRow): the fields of ``why`` with its stalls as
    text; NaN and a verdict saying so where no kernel of the range was timed."""
    if why is None:
        blank = {f.name: math.nan for f in fields(Why) if f.type == "float"}
        return {**blank, "main_kernel": "", "top_stalls": "", "limiter": UNTIMED}
    values = {f.name: getattr(why, f.name) for f in fields(Why) if f.name != "stalls"}
    return {**values, "top_stalls": why.top_stalls}
