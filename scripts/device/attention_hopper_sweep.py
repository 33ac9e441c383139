"""Build-time choices of the wgmma attention (attention_hopper.cu) timed side by side on one GPU.

Each config is the kernel source compiled with different -D values (a copy with the defines in
front), checked against float64 on ragged shapes, then timed with triton.testing.do_bench beside
cuDNN SDPA in the same process. Writes sweep.csv under $OUT.
    python3 scripts/device/attention_hopper_sweep.py STAGES_D128=2 STAGES_D128=3 STAGES_D64=6
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from side_by_side import time_rounds, write_csv
from torch.nn.attention import SDPBackend, sdpa_kernel

from rooflint.core.registry import get_family
from rooflint.engine import cuda_build
from rooflint.engine.correctness import check
from rooflint.kernels import attention

SOURCE = Path(attention.__file__).with_name("attention_hopper.cu")
ROUNDS = 5
SHAPES = [(4, 32, 4096, 128, False), (4, 32, 4096, 128, True), (4, 64, 4096, 64, False), (4, 64, 4096, 64, True)]


def build(defines: dict[str, str]):
    folder = Path(tempfile.mkdtemp())
    text = "".join(f"#define ROOFLINT_FA3_{k} {v}\n" for k, v in defines.items()) + SOURCE.read_text()
    (folder / "attention_hopper.cu").write_text(text)
    return cuda_build.load(folder / "attention_hopper.cu")


def main() -> None:
    out_dir = Path(os.environ.get("OUT", "/tmp/attention-sweep"))
    out_dir.mkdir(parents=True, exist_ok=True)
    configs = [dict([a.split("=")]) for a in sys.argv[1:]] or [{}]
    family = get_family("attention")
    rows = []
    labels = ["sdpa_cudnn"] + [",".join(f"{a}={c}" for a, c in d.items()) or "default" for d in configs]
    libraries = [build(d) for d in configs]
    for shape in SHAPES:
        b, h, n, d, causal = shape
        for label, library in zip(labels[1:], libraries):
            for check_n in (777, 256):  # ragged and whole tiles, against float64
                params = {"B": 1, "H": 2, "N": check_n, "D": d, "causal": causal}
                case = family.build_case("custom", params, "bf16", torch.device("cuda"), seed=check_n)
                got = attention.cuda_hopper_attention(
                    library, case["q"], case["k"], case["v"], causal, torch.empty_like(case["q"])
                )
                verdict = check(family, "bf16", got, family.reference(case.inputs, params))
                assert verdict.passed, f"{label} {params}: {verdict.message}"
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o = torch.empty_like(q)
        calls = [functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal)]
        calls += [functools.partial(attention.cuda_hopper_attention, lib, q, k, v, causal, o) for lib in libraries]
        times = time_rounds(dict(zip(labels, calls)), ROUNDS, lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION))
        flops = 4 * b * h * n * n * d / (2 if causal else 1)
        cudnn = statistics.median(times["sdpa_cudnn"])
        for label in labels:
            ms = statistics.median(times[label])
            rows.append(
                {"config": label, "shape": str(shape), "ms": ms, "tflops": flops / ms / 1e9, "x_cudnn": cudnn / ms}
            )
            print(rows[-1], flush=True)
    write_csv(out_dir / "sweep.csv", rows)


if __name__ == "__main__":
    main()
