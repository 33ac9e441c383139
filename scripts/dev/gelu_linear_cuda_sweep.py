"""Sweep of gelu_linear's CUDA kernel configurations on the H100, against eager in the same process.

Each configuration index of `rooflint_gelu_linear` (-1 auto, 0 mma.sync 128x128, 1 wgmma 128x256;
the "cuda v2" sweep ran indices of a temporary source, mapped in docs/perf-notes/
decode-gelu-linear.md) is checked against the float64 reference (norm-wise relative error
< 1.6e-2) at 8192^3, at GPT-2's 1024x768x3072 and at an odd 37x200x51 (odd M and N, K not a
multiple of the 64-wide slice), then timed with rooflint's timer (L2 flushed before every call)
at the two large shapes. Usage: python3 scripts/dev/gelu_linear_cuda_sweep.py CONFIG [CONFIG...]
"""

from __future__ import annotations

import sys
import time

import torch

from rooflint.core.registry import get_family
from rooflint.engine import cuda_build
from rooflint.engine.correctness import relative_error
from rooflint.engine.timing import time_cuda
from rooflint.kernels import gelu_linear as gl

TOLERANCE = 1.6e-2
DEVICE = torch.device("cuda")
SHAPES = [
    {"m": 8192, "k": 8192, "n": 8192},
    {"m": 1024, "k": 768, "n": 3072},
    {"m": 37, "k": 200, "n": 51},
]


def sweep(family, library, params: dict, configs: list[int], l2: int) -> None:
    case = family.build_case("large", params, "bf16", DEVICE)
    x, w, b = case["x"], case["w"], case["b"]
    ref = family.reference(case.inputs, params)
    m, k, n = params["m"], params["k"], params["n"]
    flops = 2.0 * m * n * k
    timed = m >= 1024
    tag = f"{m}x{k}x{n}"
    out = torch.empty((m, n), dtype=x.dtype, device=DEVICE)
    rows = [("eager", lambda: torch._addmm_activation(b, x, w.t(), use_gelu=True))]
    for config in configs:
        rows.append((f"cuda config {config}", lambda c=config: gl.cuda_gelu_linear(library, x, w, b, out, c)))
    for name, fn in rows:
        try:
            out.fill_(float("nan"))
            err = relative_error(fn(), ref)
            if not err < TOLERANCE:
                print(f"{tag} {name:<18} FAIL rel_err={err:.3e}", flush=True)
                continue
            if not timed:
                print(f"{tag} {name:<18} ok rel_err={err:.2e}", flush=True)
                continue
            t = time_cuda(fn, l2_bytes=l2)
            tflops = flops / (t.median_ms * 1e-3) / 1e12
            print(
                f"{tag} {name:<18} {t.median_ms:8.4f} ms  p20 {t.p20_ms:8.4f}  p80 {t.p80_ms:8.4f}"
                f"  {tflops:6.1f} TFLOP/s  err {err:.2e}",
                flush=True,
            )
        except Exception as error:  # a config that fails to launch is reported, not fatal
            print(f"{tag} {name:<18} ERROR {type(error).__name__}: {str(error)[:200]}", flush=True)


def main() -> None:
    configs = [int(c) for c in sys.argv[1:]] or [-1]
    started = time.time()
    print(torch.cuda.get_device_name(0), "torch", torch.__version__, flush=True)
    family = get_family("gelu_linear")
    library = cuda_build.load(cuda_build.family_source(gl.__file__))
    print(f"# built in {time.time() - started:.0f} s", flush=True)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    for params in SHAPES:
        sweep(family, library, params, configs, l2)
        torch.cuda.empty_cache()
        print(f"# {params} done at {time.time() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
