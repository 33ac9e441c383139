"""Is 8192^3 a question of time per cycle or of energy per call? (issue 14, round 18)

At 8192^3 every GEMM here draws the GPU to its power cap within a row, so its clock, and with it its
time, follows its energy per FLOP. This script times each entry two ways, in alternating rounds:
- burst: `rooflint bench`'s own timer (time_cuda: the start state, flushed calls), with the clock and
  power NVML read while the samples ran;
- sustained: back-to-back calls for SUSTAIN_S, no flush (the operands are 8x the L2), with NVML's
  energy counter read before and after: joules per call, mean watts, and the median SM clock.
From the sustained pair it also reports cycles per call (time x median clock): an entry with fewer
cycles and more joules per call than cuBLAS is faster per cycle and slower under the cap.

Each entry is first checked against float64 at a ragged shape (bf16). Writes gemm-energy.csv under
$OUT (or /tmp/rooflint-sweeps).

    python3 scripts/device/gemm_energy.py [--rounds 3] [--match 's3,s2']
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

import torch
from side_by_side import check_entries, gpu_timing_setup, write_rows

from rooflint.engine.timing import cool_down, run_for, time_cuda
from rooflint.kernels import _gemm_small as gs

SUSTAIN_S = 1.5
CHUNK_CALLS = 20  # calls between two synchronizations (and two looks at the clock)
SHAPE = {"m": 8192, "k": 8192, "n": 8192}
RAGGED = {"m": 1000, "k": 776, "n": 3000}


def entries(family) -> dict:
    """label -> builder(case) returning a zero-argument launch."""
    from rooflint.engine import cuda_build
    from rooflint.kernels import gelu_linear
    from rooflint.kernels.gelu_linear import cuda_hopper_gelu_linear

    def variant(name):
        return lambda c: family.variants[name].build(c)

    def tile(t):
        return lambda c: gs.prepare(c["x"], c["w"], c["b"], tile=t)

    def hopper(cluster):
        def build(c):
            library = cuda_build.load(cuda_build.family_source(gelu_linear.__file__, "gelu_linear_hopper"))
            out = torch.empty((c["x"].shape[0], c["w"].shape[0]), dtype=c["x"].dtype, device=c["x"].device)
            return lambda: cuda_hopper_gelu_linear(library, c["x"], c["w"], c["b"], out, 256, cluster)

        return build

    return {
        "cublaslt (eager)": variant("eager"),
        "triton": variant("triton"),
        "wavefit 128x256 s4 g16": tile(gs.GemmTile(128, 256, 64, 4, 8, 16, 1)),
        "wavefit 128x256 s4 g8": tile(gs.GemmTile(128, 256, 64, 4, 8, 8, 1)),
        "wavefit 128x256 s4 g32": tile(gs.GemmTile(128, 256, 64, 4, 8, 32, 1)),
        "wavefit 128x256 s3 g16": tile(gs.GemmTile(128, 256, 64, 3, 8, 16, 1)),
        "wavefit 256x128 s4 g16": tile(gs.GemmTile(256, 128, 64, 4, 8, 16, 1)),
        # Round 18's second call: around the 3-stage tile that won the first.
        "wavefit 128x256 s2 g16": tile(gs.GemmTile(128, 256, 64, 2, 8, 16, 1)),
        "wavefit 128x256x128 s2 g16": tile(gs.GemmTile(128, 256, 128, 2, 8, 16, 1)),
        "wavefit 128x256x32 s6 g16": tile(gs.GemmTile(128, 256, 32, 6, 8, 16, 1)),
        "wavefit 128x256 s3 g16 ws": tile(gs.GemmTile(128, 256, 64, 3, 8, 16, 1, warp_specialize=True)),
        # Not yet timed: the raster's group around the 3-stage tile (GROUP_M moved the 4-stage tile's
        # energy per call by up to 4% on the H100).
        "wavefit 128x256 s3 g8": tile(gs.GemmTile(128, 256, 64, 3, 8, 8, 1)),
        "wavefit 128x256 s3 g32": tile(gs.GemmTile(128, 256, 64, 3, 8, 32, 1)),
        # Round 19's first call also timed the 16th wave's 68 tiles cut along K (c206fae, gone since).
        "triton_wavefit": variant("triton_wavefit"),
        # Round 23: odd waves walk K from its end, onto the slabs of the shared panel the wave before
        # left in L2 (DRAM bytes per call, and with them joules per call, were the question). Round
        # 23's first two calls timed it as "wavefit rev g16", TILES[0] since (triton_wavefit).
        "wavefit forward g16": tile(replace(gs.TILES[0], reverse_odd_waves=False)),
        "wavefit rev g8": tile(replace(gs.TILES[0], group_m=8, reverse_odd_waves=True)),
        "wavefit rev g32": tile(replace(gs.TILES[0], group_m=32, reverse_odd_waves=True)),
        "triton_gluon": variant("triton_gluon"),
        "cuda_hopper cluster 2": hopper(2),
        "cuda_hopper cluster 1": hopper(1),
    }


def sustained(call, sampler) -> dict:
    """Back-to-back calls for SUSTAIN_S after the GPU has shed earlier power: ms and J per call."""
    cool_down(sampler)
    call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls = 0

    def chunk() -> None:
        nonlocal calls
        for _ in range(CHUNK_CALLS):
            call()
        torch.cuda.synchronize()
        calls += CHUNK_CALLS

    with sampler.record() as recording:
        start.record()
        run_for(chunk, SUSTAIN_S)
        end.record()
        torch.cuda.synchronize()
    t = recording.telemetry
    ms = start.elapsed_time(end) / calls
    return {
        "sus_ms": ms, "sus_j_per_call": t.energy_j / calls, "sus_w": t.energy_j / t.window_s,
        "sus_clock_mhz": t.sm_clock_mhz, "sus_clock_min_mhz": t.sm_clock_min_mhz,
        "sus_mcycles_per_call": ms * t.sm_clock_mhz / 1e3, "sus_reasons": "+".join(t.reasons),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--match", default="", help="comma-separated: entries whose label contains any")
    args = parser.parse_args()
    family, device, sampler, l2, path = gpu_timing_setup("gelu_linear", "gemm-energy.csv")

    ragged = family.build_case("custom", RAGGED, "bf16", device, seed=7)
    wanted = args.match.split(",")
    built = {
        label: make
        for label, make in entries(family).items()
        if label.startswith("cublas") or any(part in label for part in wanted)
    }
    check_entries(family, "bf16", {k: make(ragged) for k, make in built.items()},
                  family.reference(ragged.inputs, RAGGED), "ragged")  # fmt: skip
    case = family.build_case("custom", SHAPE, "bf16", device, seed=11)
    calls = {label: make(case) for label, make in built.items()}
    rows = []
    for r in range(args.rounds):
        for label, call in calls.items():
            burst = time_cuda(call, l2_bytes=l2, sampler=sampler)
            t = burst.telemetry
            row = {"round": r, "entry": label, "burst_ms": burst.median_ms, "burst_clock_mhz": t.sm_clock_mhz,
                   "burst_clock_min_mhz": t.sm_clock_min_mhz, "burst_w": t.power_median_w}  # fmt: skip
            row.update(sustained(call, sampler))
            rows.append(row)
            print({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
            write_rows(path, rows)
    print("\nmedians over rounds (x cuBLASLt: its time / the entry's)")
    peer = [row for row in rows if row["entry"].startswith("cublas")]
    peer_b = statistics.median(row["burst_ms"] for row in peer)
    peer_s = statistics.median(row["sus_ms"] for row in peer)
    peer_j = statistics.median(row["sus_j_per_call"] for row in peer)
    peer_c = statistics.median(row["sus_mcycles_per_call"] for row in peer)
    for label in calls:
        mine = [row for row in rows if row["entry"] == label]
        b, s = (statistics.median(row[key] for row in mine) for key in ("burst_ms", "sus_ms"))
        j, c = (statistics.median(row[key] for row in mine) for key in ("sus_j_per_call", "sus_mcycles_per_call"))
        print(f"{label:26s} burst {b:.4f} ms x{peer_b / b:.3f}  sustained {s:.4f} ms x{peer_s / s:.3f}  "
              f"J/call {j:.4f} ({j / peer_j:.3f})  Mcycles/call {c:.3f} ({c / peer_c:.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
