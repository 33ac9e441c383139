"""layernorm_gelu: tanh-GELU(LayerNorm(x)) in one kernel, the pre-MLP pattern.

Fusion is the whole point: unfused, the normalized tensor makes a round trip through HBM between
the two ops; fused, the GELU is a few FLOPs applied in registers before the one store of y, so the
kernel moves the same bytes as LayerNorm alone. The Triton and CUDA kernels are layernorm's, with
the GELU epilogue switched on at compile time and the mean/rstd stores switched off.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC, NEEDS_TRITON, Cost, Family, element_size
from rooflint.engine import cuda_build
from rooflint.kernels import layernorm as ln
from rooflint.kernels.layernorm.cuda import LAYERNORM_CU, cuda_layernorm
from rooflint.kernels.layernorm.triton import triton_layernorm

SQRT_2_OVER_PI = 0.7978845608028654


def gelu_tanh_reference(v):
    return 0.5 * v * (1.0 + torch.tanh(SQRT_2_OVER_PI * (v + 0.044715 * v**3)))


def reference(inputs, params):
    y, _, _ = ln.reference_normalized(inputs)
    return gelu_tanh_reference(y)


def cost(params, dtype):
    rows, hidden, size = params["rows"], params["hidden"], element_size(dtype)
    n = rows * hidden
    return Cost(
        # LayerNorm: 7 per element, 4 per row (see layernorm.cost); tanh GELU: v^3 (2), * 0.044715,
        # + v, * sqrt(2/pi), tanh (counted as 1), 1 +, * 0.5, * v: 9 per element
        cuda_flops=(7 + 9) * n + 4 * rows,
        bytes=n * size  # read x
        + 2 * hidden * size  # read w and b once
        + n * size,  # write y (no mean/rstd: nothing downstream needs them here)
    )


def gelu_tanh_unfused(v):
    """tanh GELU spelled out as elementary ops, one kernel each."""
    inner = v + 0.044715 * (v * v * v)
    return 0.5 * v * (1.0 + torch.tanh(SQRT_2_OVER_PI * inner))


def layernorm_gelu_unfused(x, weight, bias):
    y, _, _ = ln.layernorm_unfused_fp32(x, weight, bias)
    return gelu_tanh_unfused(y).to(x.dtype)


def unfused_bytes(params, dtype):
    n, size = params["rows"] * params["hidden"], element_size(dtype)
    f = 4
    gelu = (
        2 * n * f  # v * v: read v (both operands are the same tensor), write
        + 3 * n * f  # (v * v) * v: read two, write
        + 2 * n * f  # * 0.044715: read, write
        + 3 * n * f  # v + ...: read two, write
        + 2 * n * f  # * sqrt(2/pi): read, write
        + 2 * n * f  # tanh: read, write
        + 2 * n * f  # 0.5 * v: read, write
        + 2 * n * f  # 1 + tanh: read, write
        + 3 * n * f  # the product: read two, write
    )
    downcast = 0 if size == f else n * f + n * size  # .to(dtype): read fp32, write y
    return ln.unfused_trip_bytes(params, dtype) + gelu + downcast


FAMILY = Family(
    "layernorm_gelu",
    summary="tanh GELU of LayerNorm(x) with weight and bias, fused",
    sizes={
        "small": [{"rows": 512, "hidden": 1000}],
        # 256 MiB moved in bf16, 5x the H100's 50 MB L2: the same shape as layernorm's large.
        "large": [{"rows": 16384, "hidden": 4096}],
    },
    make_inputs=ln.make_inputs,
    reference=reference,
    cost=cost,
)


@FAMILY.variant("eager_unfused", modeled_bytes=unfused_bytes)
def eager_unfused(case):
    """the unfused fp32 LayerNorm ops, then GELU as elementary ops"""
    x, w, b = case["x"], case["weight"], case["bias"]
    return lambda: layernorm_gelu_unfused(x, w, b)


def layernorm_gelu_builtin(x, weight, bias):
    return F.gelu(F.layer_norm(x, [x.shape[-1]], weight, bias, ln.EPS), approximate="tanh")


@FAMILY.variant(
    "eager",
    # two built-in kernels: LayerNorm writes y, GELU reads it back and writes the result
    modeled_bytes=lambda p, d: cost(p, d).bytes + 2 * p["rows"] * p["hidden"] * element_size(d),
    baseline=True,
)
def eager(case):
    """F.layer_norm then F.gelu(approximate='tanh'): PyTorch's built-ins, two kernels"""
    x, w, b = case["x"], case["weight"], case["bias"]
    return lambda: layernorm_gelu_builtin(x, w, b)


# torch.compile of each natural way to write the pair, each its own row.
@FAMILY.variant("compile_unfused", kind="compile")
def compiled_unfused(case):
    """torch.compile of the unfused form"""
    x, w, b = case["x"], case["weight"], case["bias"]
    fn = torch.compile(layernorm_gelu_unfused, dynamic=False)
    return lambda: fn(x, w, b)


@FAMILY.variant("compile_builtin", kind="compile")
def compiled_builtin(case):
    """torch.compile of F.layer_norm then F.gelu(approximate='tanh')"""
    x, w, b = case["x"], case["weight"], case["bias"]
    fn = torch.compile(layernorm_gelu_builtin, dynamic=False)
    return lambda: fn(x, w, b)


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case):
    """layernorm's Triton kernel with the GELU epilogue, no mean/rstd stores"""
    x, w, b = case["x"].contiguous(), case["weight"], case["bias"]
    y = torch.empty_like(x)
    return lambda: triton_layernorm(x, w, b, y, gelu=True)


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC), sources=(LAYERNORM_CU,))
def cuda_variant(case):
    """layernorm.cu instantiated with the GELU epilogue, no mean/rstd stores"""
    library = cuda_build.load(LAYERNORM_CU)
    x, w, b = case["x"].contiguous(), case["weight"], case["bias"]
    y = torch.empty_like(x)
    return lambda: cuda_layernorm(library, x, w, b, y, gelu=True)
