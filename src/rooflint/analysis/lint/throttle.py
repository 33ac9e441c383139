"""Whether a row was timed on a GPU running at its own healthy speed.

boost_clock_mhz (the boost clock of the GPU that measured a row), throttle_reason (the evidence for
the throttled rule: bench's verdict, or an SM clock well under the boost clock) and shared_gpu_note
(bench's note that another process computed on the GPU meanwhile). compare reads them too, to call a
pair of rows untrusted.
"""

from __future__ import annotations

from rooflint.analysis.lint.roof import gpu_key
from rooflint.core.fmt import finite
from rooflint.core.specs import GpuSpec, builtin_specs
from rooflint.outputs.results import SHARED_GPU_NOTE, ResultRow

# A clock under 90% of the boost clock makes every SM-bound time 10%+ slower than the GPU's own
# speed: more than the noise compare forgives. The same share as bench's throttle check.
THROTTLED_CLOCK = 0.90


def boost_clock_mhz(
    row: ResultRow, spec: GpuSpec | None = None, spec_by_key: dict[str, GpuSpec] | None = None
) -> float | None:
    """The boost clock of the GPU that measured the row: the spec its gpu column names, else (a GPU
    no spec knows, a plain CSV judged with --gpu) the judging ``spec``; None where it has none."""
    specs = spec_by_key or builtin_specs()
    own = specs.get(gpu_key(row.gpu, spec_by_key)) if row.gpu else None
    source = own or spec
    return source.get("boost_clock_mhz") if source is not None else None


def throttle_reason(row: ResultRow, boost_mhz: float | None) -> str:
    """Why the row's time is not what this GPU does when healthy, or "" when nothing says so.

    - bench marked the row throttled (schema 2: NVML clocks under 90% of the clock the GPU held
      under load at the start of the run, or a thermal/hardware slowdown, after its re-timings);
    - or, for a row whose clocks bench did not sample through NVML (today's schema-1 files record
      one nvidia-smi read of sm_clock_mhz; other tools' tables), its SM clock is under 90% of the
      GPU's boost clock. Rows NVML sampled keep bench's verdict: its reference is the clock this
      GPU really holds under load, which on power-limited parts is below boost when healthy.
      Sustained rows run at the power cap by design, so the boost clock does not judge them either.
    """
    reasons = (
        f"clock events: {row.clock_event_reasons.replace(';', ', ')}"
        if row.clock_event_reasons
        else "no clock_event_reasons recorded"
    )
    clock = f"SM clock {row.sm_clock_mhz:.0f} MHz" if finite(row.sm_clock_mhz) else "SM clock not recorded"
    if finite(row.sm_clock_min_mhz):
        clock += f" (min {row.sm_clock_min_mhz:.0f})"
    if row.throttled:
        retries = f" after {row.throttle_retries} re-timings" if row.throttle_retries else ""
        return f"bench marked it throttled{retries}: {clock}; {reasons}"
    if finite(row.sm_clock_min_mhz) or row.regime == "sustained":
        return ""
    if finite(row.sm_clock_mhz) and boost_mhz and row.sm_clock_mhz < THROTTLED_CLOCK * boost_mhz:
        return (
            f"{clock} is {100 * row.sm_clock_mhz / boost_mhz:.0f}% of the {boost_mhz:.0f} MHz boost clock "
            f"(< {100 * THROTTLED_CLOCK:.0f}%), {reasons}: its power cap (dense tensor-core work reaches it), "
            "heat or another process slowed the GPU"
        )
    return ""


def shared_gpu_note(row: ResultRow) -> str:
    """The row's note that NVML saw another process computing on its GPU while it was timed, or "".

    Its SMs were shared, so its time says as little about its code as a throttled clock: beside a
    matmul load on an H100, rows ran 2-2.6x slower at clocks bench did not call throttled
    (reports/throttle)."""
    at = row.message.find(SHARED_GPU_NOTE)
    return row.message[at:][:120] if at >= 0 else ""
