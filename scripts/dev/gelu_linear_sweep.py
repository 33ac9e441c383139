"""Sweep of gelu_linear's Triton kernels on the H100, against eager, at both large shapes.

For each shape: eager (torch._addmm_activation, cuBLASLt's fused bias+GELU), F.linear + F.gelu,
the family's `triton` variant (autotuned) and explicit configurations of its kernel. Each is
checked against the float64 reference (norm-wise relative error < 1.6e-2) and timed with
rooflint's timer (L2 flushed before every call). The first run (docs/perf-notes/
decode-gelu-linear.md, "triton v3") also timed the old pointer and TMA kernels and two knobs since
removed (a whole-tile store, an unflattened tile loop); those rows are in the notes.
Usage: python3 scripts/dev/gelu_linear_sweep.py [--shapes gpt2,square]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
import triton

from rooflint.core.registry import get_family
from rooflint.engine.correctness import relative_error
from rooflint.engine.timing import time_cuda
from rooflint.kernels import gelu_linear as gl

SHAPES = {"gpt2": {"m": 1024, "k": 768, "n": 3072}, "square": {"m": 8192, "k": 8192, "n": 8192}}
TOLERANCE = 1.6e-2
DEVICE = torch.device("cuda")

# (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps, GROUP_M, persistent): persistent launches one program
# per SM, else one per tile.
CONFIGS = [
    (128, 256, 64, 3, 8, 8, True),
    (128, 256, 64, 4, 8, 8, True),
    (128, 256, 64, 4, 8, 16, True),
    (256, 128, 64, 3, 8, 8, True),
    (256, 128, 64, 4, 8, 8, True),
    (128, 128, 64, 4, 8, 8, True),
    (128, 128, 64, 3, 8, 8, False),
    (128, 128, 64, 4, 4, 8, True),
    (128, 128, 128, 3, 8, 8, True),
    (64, 256, 64, 4, 4, 8, True),
    (64, 128, 64, 4, 4, 8, True),
    (64, 128, 128, 3, 4, 8, True),
    (128, 64, 64, 4, 4, 8, True),
]


def launch(x, w, b, out, bm, bn, bk, stages, warps, group, persistent):
    """One explicit configuration of the `triton` variant's kernel, bypassing its autotuner."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    m, k = x.shape
    n = w.shape[0]
    x_desc = TensorDescriptor.from_tensor(x, [bm, bk])
    w_desc = TensorDescriptor.from_tensor(w, [bn, bk])
    y_desc = TensorDescriptor.from_tensor(out, [bm, bn // 2])
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    grid = (min(tiles, gl.num_sms(x.device)) if persistent else tiles,)
    meta = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group, "PERSISTENT": persistent}
    gl._gelu_linear_kernel.fn[grid](
        x_desc, w_desc, y_desc, b, m, n, k, **meta, UPCAST=gl.interpreting(), num_warps=warps, num_stages=stages
    )
    return out


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
    fn = family.variants["triton"].build(case)
    row(tag, "variant triton (autotuned)", fn, ref, fn, flops, l2)
    out = torch.empty((m, n), dtype=x.dtype, device=DEVICE)
    for config in CONFIGS:
        bm, bn, bk, s, nw, group, persistent = config
        name = f"{bm}x{bn}x{bk} s{s} w{nw} g{group} {'persistent' if persistent else 'per-tile'}"

        def fn(config=config):
            return launch(x, w, b, out, *config)

        out.zero_()
        row(tag, name, fn, ref, fn, flops, l2)
    del case, ref
    torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="gpt2,square")
    args = parser.parse_args()
    started = time.time()
    print(torch.cuda.get_device_name(0), "torch", torch.__version__, "triton", triton.__version__)
    for shape in args.shapes.split(","):
        sweep(shape)
        print(f"# {shape} done at {time.time() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
