"""The launch_bound rule: whether a row's time may be mostly the host launching kernels, judged on
what its timing mode includes (docs/lint.md has the table).
"""

from __future__ import annotations

from rooflint.core.fmt import finite
from rooflint.outputs.results import ResultRow

# A PyTorch op costs about 5 us of host time (Python dispatch + cudaLaunchKernel) and a bare
# cudaLaunchKernel about 2-4 us. A time that includes the host's launches and is shorter than
# three such launches may be mostly host time: the GPU idles between kernels and the timer counts it.
LAUNCH_OVERHEAD_MS = 0.005
LAUNCH_BOUND_CALLS = 3
LAUNCH_SHARE = 0.25  # measured overhead (call - graph time) over a quarter of the call time
# Timing modes whose time is the GPU's alone. cuda_events: every call waits queued behind a spin
# kernel until its start event fires, so host launch gaps never reach the timer; cuda_graph: a
# replay launches once for many calls. Other modes (cpu_wall, cuda_events_stream: calls launched
# back to back from Python) and a plain table's unstated timing include the host's launches.
DEVICE_TIME_MODES = ("cuda_events", "cuda_graph")


def launch_bound_reason(row: ResultRow) -> str:
    """Launch-bound, judged on what the row's time includes.

    Where the launch overhead was measured (bench --cuda-graphs: back-to-back calls from Python
    minus CUDA-graph replay, per call), it decides. A device-time row without that measurement says
    nothing about launches, however short it is. A time that includes the host's launches (CPU wall
    clock, calls launched back to back, a table that does not say) may be mostly launch when it is
    under three launch overheads.
    """
    median, overhead = row.median_ms, row.launch_overhead_ms
    if finite(overhead) and finite(median) and median > 0:
        call_ms = median + overhead
        if overhead > LAUNCH_SHARE * call_ms:
            return (
                f"launch overhead is {100 * overhead / call_ms:.0f}% of a call launched from Python "
                f"({1e3 * overhead:.1f} us): without CUDA graphs this kernel is launch-bound"
            )
        return ""
    if row.timing_mode in DEVICE_TIME_MODES or not finite(median) or median <= 0:
        return ""
    limit = LAUNCH_BOUND_CALLS * LAUNCH_OVERHEAD_MS
    if median < limit:
        advice = "use a larger size" if row.timing_mode == "cpu_wall" else "measure it with bench --cuda-graphs"
        what = f"{row.timing_mode} time" if row.timing_mode else "time (which includes launches, unless stated)"
        return (
            f"median {1e3 * median:.1f} us {what} is under {LAUNCH_BOUND_CALLS} launch overheads "
            f"({1e3 * limit:.0f} us): the time may be mostly launch; {advice}"
        )
    return ""
