"""Does a burst row's start state depend on what came before it? (issue 14.) Round 19's references
logged `triton_wavefit` at 8192^3 at 1,800 MHz against its neighbours' 1,965: its kernel compiled for
1-3 s inside its row, under the 3 s after which the bench then heated the GPU, so the row started
from an idle GPU with no heat. Round 20's first run of this script (H100, conditions `after a row`
and `idle 4 s` with 0-0.5 s of heat) found 0.25-0.5 s of heat after 4 s of idle within 0.1% of a row
right after a row, and no heat 0.7-1.4% slower. Rows less than 3 s after the last one got no
heat then; rooflint now heats any row more than 1 s after the last (timing.IDLE_BEFORE_PREHEAT_S).
On an H200 (round 20, the default conditions) 1.5 s of idle with no heat cost 0.6-2.9%, with heat
within 0.1%. The H100 reference at edce3c8 still logged `triton_wavefit` at 1,845 MHz, a row that
ended 1-2 s after the one before: whether a gap under 1 s costs too is the next question
(`--conditions after:0,after:0.5,0.5:0,1:0,1:0.5`).

For each entry (cuBLASLt and `triton_wavefit` at 8192^3, cuDNN attention at D=128) the bench's
timer (time_cuda with its start state) times a row under these conditions, in a shuffled order,
REPEATS times each:
- `after a row`: right after a timed row of the same kernel (what most rows of a bench see);
- `idle X s`: after X s of idle (a compile's gap);
each with `heat Y s`: the start state's preheat set to Y s (0.5 is rooflint's PREHEAT_S; 0 runs one
chunk, what round 19's rule gave a row 1.5 s after the last). Writes preheat-ab.csv under
$OUT (or /tmp/rooflint-sweeps): per row the condition, the median time and the SM clock (median and
lowest sample), with NVML's power and temperature at the row's start.

    python3 scripts/device/preheat_ab.py [--repeats 3] [--conditions after:0,after:0.5,0.5:0,1:0,1:0.5]
"""

from __future__ import annotations

import argparse
import random
import time

import torch
import torch.nn.functional as F
from side_by_side import gpu_timing_setup, median_of, write_rows

from rooflint.engine import timing
from rooflint.kernels import _gemm_small as gs

# (idle before the row: None = right after a timed row; heat in s). --conditions takes them as
# IDLE:HEAT pairs, IDLE `after` for a row right after a row: the default is round 20's H200 call.
CONDITIONS = "after:0,after:0.5,1.5:0,1.5:0.5,4:0.5"


def parse_conditions(text: str) -> list[tuple[float | None, float]]:
    pairs = [item.split(":") for item in text.split(",")]
    return [(None if idle == "after" else float(idle), float(heat)) for idle, heat in pairs]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--conditions", default=CONDITIONS, help="IDLE:HEAT pairs, IDLE `after` or seconds")
    args = parser.parse_args()
    family, device, sampler, l2, path = gpu_timing_setup("gelu_linear", "preheat-ab.csv")
    case = family.build_case("custom", {"m": 8192, "k": 8192, "n": 8192}, "bf16", device, seed=11)
    q, k, v = (torch.randn(4, 32, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    entries = {
        "cublaslt 8192^3": family.variants["eager"].build(case),
        "triton_wavefit 8192^3": gs.prepare(case["x"], case["w"], case["b"], tile=gs.TILES[0]),
        "cudnn attention D=128": lambda: F.scaled_dot_product_attention(q, k, v),
    }
    for call in entries.values():  # compiled, warm and timed once (a cold GPU's first row) before any row
        call()
        timing.time_cuda(call, l2_bytes=l2, sampler=sampler)
    chosen = parse_conditions(args.conditions)
    conditions = [f"{'after a row' if idle is None else f'idle {idle} s'}, heat {heat} s" for idle, heat in chosen]
    settings = dict(zip(conditions, chosen))
    plan = [(label, condition) for label in entries for condition in conditions for _ in range(args.repeats)]
    random.Random(19).shuffle(plan)
    rows = []
    default_heat = timing.PREHEAT_S
    for label, condition in plan:
        call = entries[label]
        idle, timing.PREHEAT_S = settings[condition]
        if idle is None:
            timing.time_cuda(call, l2_bytes=l2, sampler=sampler)  # the row before, as in a bench
        else:
            time.sleep(idle)
        start_w, start_c = sampler.device.power_w(), sampler.device.temperature_c()
        result = timing.time_cuda(call, l2_bytes=l2, sampler=sampler)
        t = result.telemetry
        rows.append({"entry": label, "condition": condition, "ms": result.median_ms,
                     "clock_mhz": t.sm_clock_mhz, "clock_min_mhz": t.sm_clock_min_mhz,
                     "start_power_w": start_w, "start_temp_c": start_c})  # fmt: skip
        print(rows[-1], flush=True)
        write_rows(path, rows)
    timing.PREHEAT_S = default_heat
    print(f"\nmedians (x the time `{conditions[1]}`; clock MHz)")
    for label in entries:
        base = median_of(rows, entry=label, condition=conditions[1])
        for condition in conditions:
            ms = median_of(rows, entry=label, condition=condition)
            clock = median_of(rows, "clock_mhz", entry=label, condition=condition)
            print(f"{label:24s} {condition:22s} {ms:.4f} ms x{base / ms:.4f}  {clock:.0f} MHz")


if __name__ == "__main__":
    main()
