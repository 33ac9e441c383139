"""Throttle detection and retry (nvbench's model), and the row columns NVML fills.

A row is throttled when, over its timed samples, either
- its median SM clock is under ``threshold`` (engine/settings.ThrottlePolicy) of the reference
  clock: the clock this GPU held under a dense matmul load when the run started; or
- NVML reported a thermal or hardware slowdown (hw_slowdown, hw_thermal, sw_thermal, hw_power_brake).
A throttled row waits ``recovery_delay_s`` for the GPU to cool down and is timed again, up to
``retries`` times; a row still throttled after that is kept, marked throttled=True, with the reason.
A row whose re-timing sat at the power cap again and regained almost none of its clock stops
retrying at once (``held_by_own_load``): its own draw holds the clock down, and no wait changes that.
Where the row's work is compute-bound (``compute_bound``), that clock is what this kernel runs at on a
healthy GPU, reproducibly: the row is kept unthrottled, with POWER_CAPPED_NOTE saying so, so that
lint does not call it an error in every run and compare compares it. A memory-bound row cannot hold a
GPU at its cap by itself: it stays throttled.

Everything here is plain Python over Telemetry values, so tests drive it with fake samplers and
fake timers on a CPU.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rooflint.engine.nvml import SLOWDOWN_REASONS, Telemetry
from rooflint.engine.settings import Regime, ThrottlePolicy
from rooflint.outputs.results import POWER_CAPPED_NOTE

if TYPE_CHECKING:
    from rooflint.engine.timing import Timing
    from rooflint.outputs.results import ResultRow


@dataclass(frozen=True)
class Reference:
    """The clock rows are judged against, and where it came from (said in throttle messages)."""

    clock_mhz: float = math.nan
    origin: str = "measured under load at start"


def reference_clock(loaded_mhz: float, max_mhz: float, regime: Regime, threshold: float) -> Reference:
    """The reference for throttle detection.

    It is the SM clock measured at the start of the run under the regime's own load (a 0.3 s
    matmul burst for burst, a settled matmul load for sustained), since some GPUs never reach
    their maximum clock under load. In burst, though, a GPU already slow at the start (another
    job holding it at its power cap, a failing fan) would make its own slow clock the reference
    and hide every throttled row, so a burst reference under ``threshold`` of NVML's maximum SM
    clock is replaced by that maximum. Sustained rows run at the power cap by design, so their
    reference is the settled clock, whatever it is.
    """
    if regime == Regime.BURST and math.isfinite(max_mhz) and max_mhz > 0:
        if not math.isfinite(loaded_mhz) or loaded_mhz < threshold * max_mhz:
            return Reference(max_mhz, "NVML's max SM clock (the GPU was already slow under load at start)")
    return Reference(loaded_mhz)


def throttle_reasons(telemetry: Telemetry, reference: Reference, threshold: float) -> list[str]:
    """Why a timed block counts as throttled; empty when it does not (or nothing was read)."""
    why = []
    clock, ref = telemetry.sm_clock_mhz, reference.clock_mhz
    if math.isfinite(clock) and math.isfinite(ref) and ref > 0 and clock < threshold * ref:
        why.append(f"median SM clock {clock:.0f} MHz < {threshold:.0%} of {ref:.0f} MHz ({reference.origin})")
    slowdowns = [reason for reason in telemetry.reasons if reason in SLOWDOWN_REASONS]
    if slowdowns:
        why.append("slowdown reported by NVML: " + ", ".join(slowdowns))
    return why


# A re-timing that regains less than this share of the reference clock over the attempt before it,
# at the power cap and with no thermal or hardware slowdown, has not recovered and will not: the
# limiter caps the row's own draw (a long dense GEMM reaches the cap within its first few calls in
# every attempt), so further waits only lengthen the bench. Thermal slowdowns ease with time and
# keep every retry.
MIN_CLOCK_GAIN = 0.01
OWN_LOAD = "its own load holds the GPU at its power cap (a re-timing regained under 1% of the clock)"


def held_by_own_load(before: Telemetry, after: Telemetry, reference: Reference) -> bool:
    """Whether ``after``, a re-timing of the attempt that read ``before``, is throttled by the row's
    own power draw: at the power cap, no slowdown reason, and its median clock not up by
    MIN_CLOCK_GAIN of the reference. False when a clock could not be read."""
    if "sw_power_cap" not in after.reasons or SLOWDOWN_REASONS.intersection(after.reasons):
        return False
    gained, ref = after.sm_clock_mhz - before.sm_clock_mhz, reference.clock_mhz
    return math.isfinite(gained) and math.isfinite(ref) and gained < MIN_CLOCK_GAIN * ref


@dataclass
class Judged:
    """The timing a row keeps, whether it is still throttled, and how many re-timings it took."""

    timing: Timing
    throttled: bool = False
    retries: int = 0
    why: list[str] = field(default_factory=list)
    power_capped: bool = False  # compute-bound and held at the cap by its own load: kept, not throttled

    @property
    def message(self) -> str:
        timings = "re-timing" if self.retries == 1 else "re-timings"
        if self.power_capped:
            telemetry = self.timing.telemetry or Telemetry()
            return (
                f"{POWER_CAPPED_NOTE}: compute-bound work this long runs at the cap on a healthy GPU "
                f"(SM clock {telemetry.sm_clock_mhz:.0f} MHz again after {self.retries} {timings}; "
                + "; ".join(self.why)
                + ")"
            )
        if not self.throttled:
            return ""
        return f"throttled after {self.retries} {timings}: " + "; ".join(self.why)


def time_until_unthrottled(
    time_once: Callable[[], Timing],
    reference: Reference,
    policy: ThrottlePolicy,
    sleep: Callable[[float], None] = time.sleep,
    compute_bound: bool = False,
) -> Judged:
    """Time once; while the result is throttled and retries remain, wait and time again.
    The last timing is kept (the earlier ones were throttled too, or it would have stopped).
    A re-timing held at the power cap by the row's own load (held_by_own_load) ends the retries;
    a ``compute_bound`` row's is then kept as power-capped, not throttled."""
    retries = 0
    before: Telemetry | None = None
    while True:
        measured = time_once()
        telemetry = measured.telemetry or Telemetry()
        why = throttle_reasons(telemetry, reference, policy.threshold)
        if not why or retries >= policy.retries:
            return Judged(measured, bool(why), retries, why)
        if before is not None and held_by_own_load(before, telemetry, reference):
            if compute_bound:
                return Judged(measured, False, retries, why, power_capped=True)
            return Judged(measured, True, retries, [*why, OWN_LOAD])
        before = telemetry
        sleep(policy.recovery_delay_s)
        retries += 1


def energy_per_call_j(timing: Timing) -> float:
    """Joules per call from the energy counter over the timed window.

    The window also holds the L2 flushes (and, in burst, the spin kernels) between calls, so the
    window's energy is shared out by time: the share of the window the GPU spent in the timed
    calls, divided by the calls. That is the window's mean power times the call's time; docs/timing.md
    says what it over- and underestimates.
    """
    telemetry = timing.telemetry
    if telemetry is None or timing.calls <= 0:
        return math.nan
    energy, window_ms = telemetry.energy_j, telemetry.window_s * 1e3
    if not (math.isfinite(energy) and math.isfinite(window_ms) and window_ms > 0 and math.isfinite(timing.busy_ms)):
        return math.nan
    return energy * min(1.0, timing.busy_ms / window_ms) / timing.calls


def fill_row(row: ResultRow, judged: Judged) -> None:
    """Copy clocks, power, energy and the throttle verdict onto a row whose cost is already set."""
    timing = judged.timing
    telemetry = timing.telemetry or Telemetry()
    row.regime = str(timing.regime)
    row.sm_clock_mhz = telemetry.sm_clock_mhz
    row.sm_clock_min_mhz = telemetry.sm_clock_min_mhz
    row.mem_clock_mhz = telemetry.mem_clock_mhz
    row.power_median_w = telemetry.power_median_w
    row.energy_per_call_j = energy_per_call_j(timing)
    flops = (row.tensor_flops or 0.0) + (row.cuda_flops or 0.0)
    usable = math.isfinite(row.energy_per_call_j) and row.energy_per_call_j > 0
    row.flop_per_j = flops / row.energy_per_call_j if usable and flops > 0 else math.nan
    row.bytes_per_j = row.ideal_bytes / row.energy_per_call_j if usable and row.ideal_bytes > 0 else math.nan
    row.clock_event_reasons = ";".join(telemetry.reasons)  # those of the kept samples, like the clocks
    row.throttled = judged.throttled
    row.throttle_retries = judged.retries
