"""Sweep of gelu_linear's Triton kernels on the H100, against eager, at both large shapes.

For each shape: eager (torch._addmm_activation, cuBLASLt's fused bias+GELU), F.linear + F.gelu,
the family's current `triton` and `triton_tma` variants (autotuned), and explicit configurations of
the persistent TMA kernel. Each is checked against the float64 reference (norm-wise relative
error < 1.6e-2) and timed with rooflint's timer (L2 flushed before every call).
Usage: python3 scripts/dev/gelu_linear_sweep.py [--shapes gpt2,square]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from rooflint.kernels import gelu_linear as gl

from rooflint.correctness import relative_error
from rooflint.registry import get_family
from rooflint.timing import time_cuda

SHAPES = {"gpt2": {"m": 1024, "k": 768, "n": 3072}, "square": {"m": 8192, "k": 8192, "n": 8192}}
TOLERANCE = 1.6e-2
DEVICE = torch.device("cuda")

# (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps, split_store, programs_per_sm, group_m, flatten)
PERSISTENT = [
    (128, 256, 64, 3, 8, True, 1, 8, True),
    (128, 256, 64, 4, 8, True, 1, 8, True),
    (128, 256, 64, 3, 8, False, 1, 8, True),
    (128, 256, 64, 3, 8, True, 1, 8, False),
    (128, 256, 64, 4, 8, True, 1, 16, True),
    (256, 128, 64, 3, 8, True, 1, 8, True),
    (256, 128, 64, 4, 8, True, 1, 8, True),
    (128, 128, 64, 4, 8, True, 1, 8, True),
    (128, 128, 64, 3, 8, True, 2, 8, True),
    (128, 128, 64, 4, 4, True, 1, 8, True),
    (128, 128, 128, 3, 8, True, 1, 8, True),
    (64, 256, 64, 4, 4, True, 1, 8, True),
    (64, 128, 64, 4, 4, True, 1, 8, True),
    (64, 128, 64, 3, 4, True, 2, 8, True),
    (64, 128, 64, 4, 4, False, 1, 8, True),
    (64, 128, 64, 4, 4, True, 1, 8, False),
    (64, 128, 128, 3, 4, True, 1, 8, True),
    (128, 64, 64, 4, 4, True, 1, 8, True),
    (128, 64, 64, 3, 4, True, 2, 8, True),
]


def row(tag: str, name: str, fn, ref, out_of, flops: float, l2: int) -> None:
    try:
        err = relative_error(out_of(), ref)
        if not err < TOLERANCE:
            print(f"{tag} {name:<44} FAIL rel_err={err:.3e}", flush=True)
            return
        t = time_cuda(fn, l2_bytes=l2)
        tflops = flops / (t.median_ms * 1e-3) / 1e12
        print(
            f"{tag} {name:<44} {t.median_ms * 1e3:9.2f} us  p20 {t.p20_ms * 1e3:8.2f}  p80 {t.p80_ms * 1e3:8.2f}"
            f"  {tflops:6.1f} TFLOP/s  err {err:.2e}",
            flush=True,
        )
    except Exception as error:  # a config that fails to compile or launch is reported, not fatal
        print(f"{tag} {name:<44} ERROR {type(error).__name__}: {str(error)[:200]}", flush=True)


def sweep(shape: str) -> None:
    family = get_family("gelu_linear")
    params = SHAPES[shape]
    case = family.build_case("large", params, "bf16", DEVICE)
    x, w, b = case["x"], case["w"], case["b"]
    ref = family.reference(case.inputs, params)
    m, k, n = params["m"], params["k"], params["n"]
    flops = 2.0 * m * n * k
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    tag = f"{m}x{k}x{n}"

    def eager():
        return torch._addmm_activation(b, x, w.t(), use_gelu=True)

    def unfused():
        return F.gelu(F.linear(x, w, b), approximate="tanh")

    row(tag, "eager (addmm_activation)", eager, ref, eager, flops, l2)
    row(tag, "F.linear+F.gelu", unfused, ref, unfused, flops, l2)
    for variant in ("triton", "triton_tma"):
        fn = family.variants[variant].build(case)
        row(tag, f"variant {variant} (autotuned)", fn, ref, fn, flops, l2)
    out = torch.empty((m, n), dtype=x.dtype, device=DEVICE)
    for bm, bn, bk, s, nw, split, per_sm, group, flatten in PERSISTENT:
        name = f"P {bm}x{bn}x{bk} s{s} w{nw} {'split' if split else 'whole'} x{per_sm} g{group}"
        name += "" if flatten else " noflat"

        def fn(bm=bm, bn=bn, bk=bk, s=s, nw=nw, split=split, per_sm=per_sm, group=group, flatten=flatten):
            return gl.persistent_gelu_linear(x, w, b, out, bm, bn, bk, group, split, nw, s, per_sm, flatten)

        out.zero_()
        row(tag, name, fn, ref, fn, flops, l2)
    del case, ref
    torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="gpt2,square")
    args = parser.parse_args()
    started = time.time()
    print(torch.cuda.get_device_name(0), "torch", torch.__version__, "triton", gl.triton.__version__)
    for shape in args.shapes.split(","):
        sweep(shape)
        print(f"# {shape} done at {time.time() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
