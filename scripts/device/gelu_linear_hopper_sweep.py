"""The warp-specialized wgmma GEMM (gelu_linear_hopper.cu) with and without CTA pairs, beside
cuBLASLt and the Triton kernels, timed side by side on one GPU.

Every entry is checked against float64 at each shape first; then alternating rounds of
triton.testing.do_bench, so a drifting clock spreads over all of them. Writes gemm-sweep.csv
under $OUT.
    python3 scripts/device/gelu_linear_hopper_sweep.py
"""

from __future__ import annotations

import functools
import os
import statistics
from pathlib import Path

import torch
from side_by_side import check_entries, time_rounds, write_csv

from rooflint.core.registry import get_family
from rooflint.engine import cuda_build
from rooflint.kernels import gelu_linear

ROUNDS = 7
SHAPES = [(1024, 768, 3072), (8192, 8192, 8192)]
# (block_n, cluster); 0 lets the launcher choose.
CONFIGS = [(0, 1), (0, 2), (256, 2), (192, 2)]


def main() -> None:
    out_dir = Path(os.environ.get("OUT", "/tmp/gemm-sweep"))
    out_dir.mkdir(parents=True, exist_ok=True)
    family = get_family("gelu_linear")
    library = cuda_build.load(cuda_build.family_source(gelu_linear.__file__, "gelu_linear_hopper"))
    rows = []
    for m, k, n in SHAPES:
        params = {"m": m, "k": k, "n": n}
        case = family.build_case("custom", params, "bf16", torch.device("cuda"))
        entries = {name: family.variants[name].build(case) for name in ("eager", "triton", "triton_wavefit")}
        for block_n, cluster in CONFIGS:
            out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
            entries[f"cuda_hopper bn{block_n} c{cluster}"] = functools.partial(
                gelu_linear.cuda_hopper_gelu_linear, library, case["x"], case["w"], case["b"], out, block_n, cluster
            )
        reference = family.reference(case.inputs, params)
        checks = check_entries(family, "bf16", entries, reference, str(params))
        del reference
        times = time_rounds(entries, ROUNDS)
        cublas = statistics.median(times["eager"])
        for label in entries:
            ms = statistics.median(times[label])
            rows.append(
                {
                    "shape": f"{m}x{k}->{n}",
                    "entry": label,
                    "us": ms * 1e3,
                    "tflops": case.cost.flops / ms / 1e9,
                    "x_cublaslt": cublas / ms,
                    "check": checks[label],
                }
            )
            print(rows[-1], flush=True)
    write_csv(out_dir / "gemm-sweep.csv", rows)


if __name__ == "__main__":
    main()
