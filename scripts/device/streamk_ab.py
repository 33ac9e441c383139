"""The stream-K tail of `triton_wavefit` (kernels/_gemm_streamk.py) against the same tile without it,
gelu_linear's `triton` and cuBLASLt's fused bias+GELU (the `eager` variant), at 8192^3: each checked
against float64 first, then timed in alternating rounds with the bench's own timer, the SM clock and
board power read after each round (the kernels share the power cap, so a ratio is read beside them).
Writes streamk-ab.csv under $OUT.

    python3 scripts/device/streamk_ab.py [--rounds 7] [--dtype bf16] [--shape 8192,8192,8192]
    ncu --kernel-name regex:_gemm_gelu --metrics ... python3 scripts/device/streamk_ab.py --once
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402
from side_by_side import bench_timer_ms, check_entries, output_csv, write_rows  # noqa: E402

from rooflint.core.registry import get_family  # noqa: E402
from rooflint.kernels import _gemm_small  # noqa: E402


def gpu_state() -> dict:
    """The SM clock (MHz) and board power (W) now, from NVML."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    return {
        "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "power_w": round(pynvml.nvmlDeviceGetPowerUsage(handle) / 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    parser.add_argument("--shape", default="8192,8192,8192", help="m,k,n")
    parser.add_argument("--once", action="store_true", help="two calls of each wavefit entry, for ncu")
    args = parser.parse_args()
    m, k, n = (int(v) for v in args.shape.split(","))
    family = get_family("gelu_linear")
    params = {"m": m, "k": k, "n": n}
    case = family.build_case("custom", params, args.dtype, torch.device("cuda"))
    x, w, b = case["x"], case["w"], case["b"]
    tile = _gemm_small.choose_tile(m, n, torch.cuda.get_device_properties(0).multi_processor_count)
    stream_k = _gemm_small.prepare(x, w, b, tile=tile, stream_k=True)
    entries = {
        "eager (cuBLASLt)": family.variants["eager"].build(case),
        "triton": family.variants["triton"].build(case),
        f"wavefit {tile.label}": _gemm_small.prepare(x, w, b, tile=tile, stream_k=False),
        f"wavefit {tile.label} stream-K ({stream_k.dp_tiles}+{stream_k.sk_tiles} tiles)": stream_k,
    }
    if args.once:
        for call in list(entries.values())[2:]:
            call(), call()
            torch.cuda.synchronize()
        return
    checks = check_entries(family, args.dtype, entries, family.reference(case.inputs, params), f"{params}")
    flops = case.cost.flops
    rows: list[dict] = []
    path = output_csv("streamk-ab.csv")
    for round_ in range(args.rounds):
        for label, call in entries.items():
            ms = bench_timer_ms(call)
            rows.append({"round": round_, "entry": label, "ms": round(ms, 4), "tflops": round(flops / ms / 1e9, 1),
                         **gpu_state(), "check": checks[label]})  # fmt: skip
            print(rows[-1], flush=True)
            write_rows(path, rows)  # after every row: a later hang keeps what was measured
    peer = median([r["ms"] for r in rows if r["entry"] == "eager (cuBLASLt)"])
    for label in entries:
        mine = median([r["ms"] for r in rows if r["entry"] == label])
        print(f"{label}: median {mine:.4f} ms, {peer / mine:.3f}x cuBLASLt")


if __name__ == "__main__":
    main()
