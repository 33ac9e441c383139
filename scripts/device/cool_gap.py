"""How long a GPU must idle before a burst row so that the row's clock does not depend on the rows
before it: cuDNN attention and the Gluon attention (D=128, non-causal, `--size large`) timed as
burst rows (the bench's timer and NVML sampler), each after a compute-bound "previous row" (0.5 s of
back-to-back cuDNN calls) and an idle gap of 0 to 8 s, the gaps in a shuffled order, twice each.
Writes cool-gap.csv under $OUT: per row the gap, the median time, the SM clock (median and min of
the samples), power and temperature at the row's start.

    python3 scripts/device/cool_gap.py      # on the GPU
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

import torch

GAPS_S = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)
REPEATS = 2


def main() -> None:
    import torch.nn.functional as F

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from side_by_side import output_csv, write_rows

    from rooflint.engine import timing
    from rooflint.engine.nvml import NvmlDevice, NvmlSampler
    from rooflint.kernels import _attention_gluon

    # The gaps here are the experiment's own: no preheat after a long gap, no cool-down before a row
    # (burst_row looks start_state up in the module, so this reaches time_cuda).
    timing.start_state = lambda sampler, **kwargs: None
    device = NvmlDevice.open(torch.cuda.current_device())
    sampler = NvmlSampler(device)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    q, k, v = (torch.randn(4, 32, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    entries = {
        "cudnn": lambda: F.scaled_dot_product_attention(q, k, v),
        "gluon": _attention_gluon.prepare(q, k, v, False),
    }

    def cudnn_chunk() -> None:
        for _ in range(20):
            entries["cudnn"]()
        torch.cuda.synchronize()

    plan = [(gap, label) for gap in GAPS_S for label in entries for _ in range(REPEATS)]
    random.Random(17).shuffle(plan)
    rows, path = [], output_csv("cool-gap.csv")
    for call in entries.values():
        call()
    for gap, label in plan:
        timing.run_for(cudnn_chunk, 0.5)  # the compute-bound previous row
        time.sleep(gap)
        start_power, start_temp = device.power_w(), device.temperature_c()
        measured = timing.time_cuda(entries[label], l2_bytes=l2, sampler=sampler)
        t = measured.telemetry
        rows.append({
            "variant": label, "gap_s": gap, "median_ms": round(measured.median_ms, 4),
            "sm_clock_mhz": t.sm_clock_mhz, "sm_clock_min_mhz": t.sm_clock_min_mhz,
            "power_at_start_w": round(start_power, 1), "temp_at_start_c": start_temp,
            "power_median_w": t.power_median_w,
        })  # fmt: skip
        print(rows[-1], flush=True)
        write_rows(path, rows)
    for label in entries:
        for gap in GAPS_S:
            times = [r["median_ms"] for r in rows if r["variant"] == label and r["gap_s"] == gap]
            clocks = [r["sm_clock_mhz"] for r in rows if r["variant"] == label and r["gap_s"] == gap]
            print(f"{label} gap {gap:4.1f} s: {statistics.median(times):.4f} ms at {statistics.median(clocks)} MHz")


if __name__ == "__main__":
    main()
