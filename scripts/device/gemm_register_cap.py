"""8192^3 with ptxas capped at 168 registers, in burst time (issue 14, round 19).

Entries, each checked against float64 at a ragged shape first, then timed in alternating rounds by
`rooflint bench`'s own timer (time_cuda, its start state, L2 flushed), with the SM clock NVML read:
cuBLASLt, the wave-fitted 128x256 tile with ptxas's own register count (164) and capped at 168
(TILES[0], as `triton_wavefit` builds it), at 8192^3 and at 8448x8192 -> 8192 (2112 tiles: 16
whole waves, where the tile count leaves no SM idle at the end). Round 20 adds gelu_linear.py's own
autotuned `triton` kernel (its 8192^3 config, 164 registers) and the same config launched with
maxnreg 168 and 160 (H100: 0.9984x and 0.9967x cuBLASLt
against 0.9980x uncapped, within the rounds' spread; reports/h100/probe-round20). Round 19 also timed, as
split_tail_ab.py, the tail wave's tiles cut along K (c206fae; reports/h100/probe-round19).
Writes gemm-register-cap.csv under $OUT (or /tmp/rooflint-sweeps).

    python3 scripts/device/gemm_register_cap.py [--rounds 7]
"""

from __future__ import annotations

import argparse

import torch
from side_by_side import burst_rounds, check_entries, gpu_timing_setup, median_of

from rooflint.kernels import _gemm_small as gs

RAGGED = {"m": 1000, "k": 776, "n": 3000}
SQUARE = {"m": 8192, "k": 8192, "n": 8192}
WHOLE_WAVES = {"m": 8448, "k": 8192, "n": 8192}  # 66 x 32 = 2112 tiles = 16 x 132


def entries(family) -> dict:
    """label -> (shape, builder(case) returning a zero-argument launch)."""

    uncapped = gs.GemmTile(128, 256, 64, 3, 8, 16, 1)  # TILES[0] before round 19

    def tile(t):
        return lambda c: gs.prepare(c["x"], c["w"], c["b"], tile=t)

    def cublaslt(c):
        return family.variants["eager"].build(c)

    def triton_capped(registers):
        return lambda c: _autotuned_config(c, registers)

    return {
        "cublaslt (eager)": (SQUARE, cublaslt),
        "triton": (SQUARE, lambda c: family.variants["triton"].build(c)),
        "triton maxnreg 168": (SQUARE, triton_capped(168)),
        "triton maxnreg 160": (SQUARE, triton_capped(160)),
        "uncapped": (SQUARE, tile(uncapped)),
        "maxnreg 168": (SQUARE, tile(gs.TILES[0])),
        "triton_wavefit": (SQUARE, lambda c: family.variants["triton_wavefit"].build(c)),
        "whole waves: cublaslt": (WHOLE_WAVES, cublaslt),
        "whole waves: uncapped": (WHOLE_WAVES, tile(uncapped)),
        "whole waves: maxnreg 168": (WHOLE_WAVES, tile(gs.TILES[0])),
    }


def _autotuned_config(case, registers: int):
    """gelu_linear.py's `triton` kernel with its 8192^3 config (128x256x64, 3 stages, 8 warps,
    persistent, GROUP_M 16) set by hand, so ptxas can be given a register budget."""
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor

    from rooflint.kernels import gelu_linear as gl
    from rooflint.kernels import sm_count

    x, w, b = case["x"], case["w"], case["b"]
    m, k = x.shape
    n = w.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    meta = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 16, "PERSISTENT": True}
    x_desc = TensorDescriptor.from_tensor(x, [128, 64])
    w_desc = TensorDescriptor.from_tensor(w, [256, 64])
    y_desc = TensorDescriptor.from_tensor(out, [128, 128])  # the epilogue stores two half tiles
    grid = (min(triton.cdiv(m, 128) * triton.cdiv(n, 256), sm_count(x.device, 3)),)
    kernel = gl._gelu_linear_kernel.fn  # the JIT function under the autotuner

    def launch():
        kernel[grid](x_desc, w_desc, y_desc, b, m, n, k, UPCAST=False, num_warps=8, num_stages=3,
                     maxnreg=registers, **meta)  # fmt: skip
        return out

    return launch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    family, device, sampler, l2, path = gpu_timing_setup("gelu_linear", "gemm-register-cap.csv")
    built = entries(family)
    ragged = family.build_case("custom", RAGGED, "bf16", device, seed=7)
    checks = check_entries(family, "bf16", {k: make(ragged) for k, (_, make) in built.items()},
                           family.reference(ragged.inputs, RAGGED), "ragged")  # fmt: skip
    cases = {str(shape): family.build_case("custom", shape, "bf16", device, seed=11) for shape in (SQUARE, WHOLE_WAVES)}
    calls = {label: make(cases[str(shape)]) for label, (shape, make) in built.items()}
    rows = []
    burst_rounds(calls, args.rounds, l2, sampler, path, rows, {label: {"check": checks[label]} for label in calls})
    print("\nmedians over rounds")
    for label in calls:
        ms = median_of(rows, entry=label)
        peer = "whole waves: cublaslt" if label.startswith("whole") else "cublaslt (eager)"
        peer_ms = median_of(rows, entry=peer)
        print(f"{label:40s} {ms:.4f} ms  x{peer_ms / ms:.4f} cuBLASLt")


if __name__ == "__main__":
    main()
