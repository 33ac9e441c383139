"""Does the burst start state after a long idle gap put a row at the clock of a row that follows
another row? (issue 14, round 19's finding: every reference's `triton_wavefit` row at 8192^3, the
one Triton row there that compiles inside its row, ran 6-9% below its neighbours' clock.)

For each entry (cuBLASLt and `triton_wavefit` at 8192^3, cuDNN attention at D=128) the bench's
timer (time_cuda with its start state) times a row under these conditions, in a shuffled order,
REPEATS times each:
- `after a row`: right after a timed row of the same kernel (what most rows of a bench see);
- `idle, preheat X s`: after IDLE_S of idle (a compile's gap), with the start state's preheat set to
  X s (0.5 is rooflint's PREHEAT_S; 0 runs one chunk).
The preheat that leaves a row at the `after a row` clock and time is the one to take. Writes
preheat-ab.csv under $OUT (or /tmp/rooflint-sweeps): per row the condition, the median time and the
SM clock (median and lowest sample), with NVML's power and temperature at the row's start.

    python3 scripts/device/preheat_ab.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch
import torch.nn.functional as F
from side_by_side import gpu_timing_setup, write_rows

from rooflint.engine import timing
from rooflint.kernels import _gemm_small as gs

IDLE_S = 4.0  # past timing.IDLE_BEFORE_PREHEAT_S (3 s), as after a kernel's compile
PREHEATS_S = (0.5, 0.25, 0.1, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    family, device, sampler, l2, path = gpu_timing_setup("gelu_linear", "preheat-ab.csv")
    case = family.build_case("custom", {"m": 8192, "k": 8192, "n": 8192}, "bf16", device, seed=11)
    q, k, v = (torch.randn(4, 32, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    entries = {
        "cublaslt 8192^3": family.variants["eager"].build(case),
        "triton_wavefit 8192^3": gs.prepare(case["x"], case["w"], case["b"], tile=gs.TILES[0]),
        "cudnn attention D=128": lambda: F.scaled_dot_product_attention(q, k, v),
    }
    for call in entries.values():  # compiled and warm before any timed row
        call()
    torch.cuda.synchronize()
    conditions = ["after a row", *(f"idle, preheat {s} s" for s in PREHEATS_S)]
    plan = [(label, condition) for label in entries for condition in conditions for _ in range(args.repeats)]
    random.Random(19).shuffle(plan)
    rows = []
    for label, condition in plan:
        call = entries[label]
        if condition == "after a row":
            timing.time_cuda(call, l2_bytes=l2, sampler=sampler)  # the row before, as in a bench
            timing.PREHEAT_S = 0.5
        else:
            time.sleep(IDLE_S)
            timing.PREHEAT_S = float(condition.split()[2])
        start_w, start_c = sampler.device.power_w(), sampler.device.temperature_c()
        result = timing.time_cuda(call, l2_bytes=l2, sampler=sampler)
        t = result.telemetry
        rows.append({"entry": label, "condition": condition, "ms": result.median_ms,
                     "clock_mhz": t.sm_clock_mhz, "clock_min_mhz": t.sm_clock_min_mhz,
                     "start_power_w": start_w, "start_temp_c": start_c})  # fmt: skip
        print(rows[-1], flush=True)
        write_rows(path, rows)
    timing.PREHEAT_S = 0.5
    print("\nmedians (x the `after a row` time; clock MHz)")
    for label in entries:
        base = statistics.median(r["ms"] for r in rows if r["entry"] == label and r["condition"] == "after a row")
        for condition in conditions:
            mine = [r for r in rows if r["entry"] == label and r["condition"] == condition]
            ms = statistics.median(r["ms"] for r in mine)
            clock = statistics.median(r["clock_mhz"] for r in mine)
            print(f"{label:24s} {condition:22s} {ms:.4f} ms x{base / ms:.4f}  {clock:.0f} MHz")


if __name__ == "__main__":
    main()
