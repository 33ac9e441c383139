"""gelu_linear: Y = GELU_tanh(X W^T + b), an MLP up-projection with its activation fused.

The matmul is compute-bound (2MNK tensor-core FLOPs over (MK + NK + MN) elements); the bias and
GELU are a few CUDA-core FLOPs per output. Fusing them into the GEMM's epilogue saves the round
trip of Y through HBM that the unfused chain pays (write Y, read it, write it again).

Dtypes are fp16 and bf16, and fp8 (fp8_e4m3, fp8_e5m2: fp8.py, docs/quantized.md) when asked for;
bench without --dtype runs bf16. An fp32 GEMM either runs on CUDA cores (51 TFLOP/s on an H100,
a different kernel entirely) or silently in TF32 (10-bit mantissas, which an fp32 tolerance would
reject); neither says anything about the fused epilogue, so fp32 is left out rather than blurred.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from rooflint.core.family import NEEDS_CUDA, Cost, Family, element_size, randn

# CUDA-core FLOPs of one tanh-GELU: x^2, x^3, *0.044715, +x, *sqrt(2/pi), tanh, +1, *x, *0.5.
GELU_FLOPS = 9
# The 16-bit dtypes every variant but fp8.py's runs; the fp8 formats (quantized X and W, per row).
FLOAT_DTYPES = ("fp16", "bf16")
FP8_DTYPES = ("fp8_e4m3", "fp8_e5m2")


def make_inputs(params, dtype, device, generator):
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return fp8.make_inputs(params, dtype, device, generator)
    m, k, n = params["m"], params["k"], params["n"]
    # W scaled by 1/sqrt(K), as nn.Linear initialises it, keeps X W^T near unit variance, where
    # GELU is curved; unscaled, |XW^T| ~ sqrt(K) = 90 and GELU degenerates into a ReLU.
    w = randn([n, k], torch.float32, device, generator) * k**-0.5
    return {
        "x": randn([m, k], dtype, device, generator),
        "w": w.to(dtype),
        "b": randn([n], dtype, device, generator),
    }


def reference(inputs, params):
    if "sx" in inputs:  # fp8 codes with their scales
        return fp8.reference(inputs, params)
    x, w, b = inputs["x"].double(), inputs["w"].double(), inputs["b"].double()
    return F.gelu(F.linear(x, w, b), approximate="tanh")


def cost(params, dtype):
    if dtype in FP8_DTYPES:
        return fp8.cost(params, dtype)
    m, k, n, size = params["m"], params["k"], params["n"], element_size(dtype)
    return Cost(
        tensor_flops=2 * m * n * k,  # one multiply-add per (row, column, k) on the tensor cores
        cuda_flops=m * n * (1 + GELU_FLOPS),  # the epilogue: bias add, then GELU, per output
        bytes=m * k * size  # read X
        + n * k * size  # read W
        + n * size  # read b
        + m * n * size,  # write Y
    )


def unfused_bytes(params, dtype):
    """F.linear writes Y (bias fused by cuBLAS); F.gelu reads Y and writes it again."""
    return cost(params, dtype).bytes + 2 * params["m"] * params["n"] * element_size(dtype)


FAMILY = Family(
    "gelu_linear",
    summary="Y = gelu_tanh(X @ W^T + b)",
    sizes={
        "small": [{"m": 256, "k": 384, "n": 512}],
        # GPT-2's MLP up-projection (1024 tokens, 768 -> 3072): 12.6 MB, L2-sized, so the timer's
        # L2 flush is what keeps it honest; the same layer in a decode step of 8 sequences (a 4.7 MB
        # weight stream at 16 FLOP/B, memory-bound); and the square 8192^3 GEMM, 384 MiB, compute-bound.
        "large": [{"m": 1024, "k": 768, "n": 3072}, {"m": 8, "k": 768, "n": 3072}, {"m": 8192, "k": 8192, "n": 8192}],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
    dtypes=(*FLOAT_DTYPES, *FP8_DTYPES),
    # Defaults hold with room to spare: with fp32 accumulation the K=8192 dot products carry an
    # error near sqrt(K) * 2^-24 relative, far below the one rounding of Y to the output dtype
    # (2^-9 bf16, 2^-12 fp16). Measured on an H100 at both sizes: 1.655e-3 bf16 and 2.1e-4 fp16 for
    # every fused variant, the one output rounding dominating (6ebd299); ten times under each tolerance.
    # fp8 has the bf16 tolerance (DEFAULT_TOLERANCES): the reference multiplies the dequantized
    # operands, so what is left is the kernel's accumulation order and Y's one rounding to bf16.
    tolerances={"fp16": 2e-3, "bf16": 1.6e-2},
)


def fused_epilogue(x, w, b):
    return torch._addmm_activation(b, x, w.t(), use_gelu=True)


def eager_bytes(params, dtype):
    """In fp8 the eager form is unfused: torch._scaled_mm writes Y (bias fused), F.gelu reads it and
    writes it again. The 16-bit form fuses the GELU: NaN, nothing beyond the ideal bytes."""
    if dtype not in FP8_DTYPES:
        return math.nan
    return cost(params, dtype).bytes + 2 * params["m"] * params["n"] * element_size("bf16")


@FAMILY.variant("eager", needs=(NEEDS_CUDA,), baseline=True, modeled_bytes=eager_bytes)
def eager(case):
    """torch._addmm_activation(use_gelu=True): cuBLASLt's GELU+bias epilogue; fp8: torch._scaled_mm, then F.gelu"""
    if case.dtype_name in FP8_DTYPES:  # the baseline of every dtype: speedups divide by its time
        return fp8.eager(case)
    # CUDA only: on CUDA the fused epilogue (and its fallback) is tanh-GELU, but the CPU kernel
    # applies the exact erf GELU, a different function.
    x, w, b = case["x"], case["w"], case["b"]
    return lambda: fused_epilogue(x, w, b)


def unfused(x, w, b):
    return F.gelu(F.linear(x, w, b), approximate="tanh")


@FAMILY.variant("eager_unfused", modeled_bytes=unfused_bytes, dtypes=FLOAT_DTYPES)
def eager_unfused(case):
    """F.linear, then F.gelu: Y makes an extra round trip through HBM"""
    x, w, b = case["x"], case["w"], case["b"]
    return lambda: unfused(x, w, b)


# torch.compile of each natural way to write the op, each its own row. Inductor's default mode hands
# the matmul to cuBLAS (addmm, bias fused) and generates only the GELU kernel, so the unfused form
# moves the unfused chain's bytes; fusing into a Triton GEMM template needs mode="max-autotune",
# which is not what "compile" means here.
@FAMILY.variant("compile_unfused", kind="compile", modeled_bytes=unfused_bytes, dtypes=FLOAT_DTYPES)
def compiled_unfused(case):
    """torch.compile(F.linear then F.gelu)"""
    x, w, b = case["x"], case["w"], case["b"]
    fn = torch.compile(unfused, dynamic=False)
    return lambda: fn(x, w, b)


# Inductor has no lowering for _addmm_activation and calls the aten op itself (cuBLASLt's epilogue),
# so this row shows what compiling the fused built-in costs or saves around that one call.
@FAMILY.variant("compile_builtin", kind="compile", needs=(NEEDS_CUDA,), dtypes=FLOAT_DTYPES)
def compiled_builtin(case):
    """torch.compile(torch._addmm_activation(use_gelu=True))"""
    # CUDA only, as eager: on CPU the op is the erf GELU, not this family's tanh GELU.
    x, w, b = case["x"], case["w"], case["b"]
    fn = torch.compile(fused_epilogue, dynamic=False)
    return lambda: fn(x, w, b)


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.gelu_linear import cuda, fp8, gluon, triton, wavefit  # noqa: E402, F401
