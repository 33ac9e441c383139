"""The Gluon GEMM (gelu_linear's `triton_gluon`, rooflint.kernels._gemm_gluon) beside cuBLASLt's fused
bias+GELU (the `eager` variant), the wave-fitted Triton GEMM and the CUDA wgmma GEMM, at the
compute-bound shapes of `bench gelu_linear --size large` (GPT-2's 1024x768->3072 and 8192^3), after
float64 checks at ragged shapes in bf16 and fp16 and a repeatability check (30 calls, identical bits).
Each (K step, stage count, store order) of CONFIGS is timed with the bench's own timer, so the defaults
(BLOCK_K, STAGES, OVERLAP_STORE) are a measured choice.

    python3 scripts/device/gluon_gemm.py            # on the GPU; writes gluon-gemm.csv under $OUT
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

from rooflint.kernels import _gemm_gluon

SHAPES = {"gpt2": ((1024, 768, 3072), 9), "8192": ((8192, 8192, 8192), 3)}  # (m, k, n), timing rounds
# (block_k, stages, overlap_store) that fit beside the 48 KB of output tiles in 227 KB; the default first.
# (Round 14 also timed a ping-pong schedule here, at a8e6921: reports/h100/probe-round14.)
CONFIGS = ((64, 4, True), (64, 4, False), (32, 6, True), (32, 8, True))
CHECKS = ((130, 72, 200), (257, 776, 384), (1500, 264, 2000), (1024, 768, 3072))


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from side_by_side import bench_timer_ms, check_row, output_csv, repeat_row, time_rounds, write_rows

    from rooflint.core.registry import get_family
    from rooflint.engine import cuda_build
    from rooflint.kernels import _gemm_small, gelu_linear

    family = get_family("gelu_linear")
    rows, csv_path = [], output_csv("gluon-gemm.csv")
    for block_k, stages, overlap in CONFIGS:
        for m, k, n in CHECKS:
            for dtype in ("bf16", "fp16"):

                def gemm(case, block_k=block_k, stages=stages, overlap=overlap):
                    return _gemm_gluon.prepare(case["x"], case["w"], case["b"], stages, block_k, overlap)()

                name = f"check k{block_k} s{stages} o{overlap:d} {m}x{k}->{n} {dtype}"
                check_row(family, {"m": m, "k": k, "n": n}, dtype, gemm, name, rows, csv_path, seed=m + n)
    case = family.build_case("custom", {"m": 1024, "k": 2048, "n": 3072}, "bf16", torch.device("cuda"), seed=3)
    repeat_row(_gemm_gluon.prepare(case["x"], case["w"], case["b"]), 30, rows, csv_path)

    library = cuda_build.load(cuda_build.family_source(gelu_linear.__file__, "gelu_linear_hopper"))
    for label, ((m, k, n), rounds) in SHAPES.items():
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        hopper_out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        entries = {
            "cublaslt": lambda x=x, w=w, b=b: gelu_linear.fused_epilogue(x, w, b),
            "wavefit": _gemm_small.prepare(x, w, b),
            "cuda_hopper": lambda x=x, w=w, b=b, o=hopper_out: gelu_linear.cuda_hopper_gelu_linear(library, x, w, b, o),
        }
        for block_k, stages, overlap in CONFIGS:
            entries[f"gluon_k{block_k}_s{stages}_o{overlap:d}"] = _gemm_gluon.prepare(x, w, b, stages, block_k, overlap)
        times = time_rounds(entries, rounds, timer=bench_timer_ms)
        med = {key: statistics.median(value) for key, value in times.items()}
        row = {"shape": f"{label} {m}x{k}->{n}", "status": "ok"}
        for key, ms in med.items():
            row[f"{key}_us"] = ms * 1e3
            row[f"{key}_x_cublaslt"] = med["cublaslt"] / ms
            row[f"{key}_rounds_us"] = " ".join(f"{t * 1e3:.2f}" for t in times[key])
        rows.append(row)
        print(row, flush=True)
    write_rows(csv_path, rows)


if __name__ == "__main__":
    main()
