"""gelu: y = (tanh-GELU(x) + bias) * scale, the activation-plus-epilogue chain of an MLP.

Elementwise and memory-bound: 11 FLOPs per element against 4 bytes (bf16 in and out), so the
fused kernels are judged by how close they stream to HBM bandwidth, and the unfused chain by how
many full-tensor trips its separate kernels cost.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from rooflint.core.family import Cost, Family, element_size, randn

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


SCALE = 2.0


def make_inputs(params, dtype, device, generator):
    rows, cols = params["rows"], params["cols"]
    return {
        "x": randn([rows, cols], dtype, device, generator),
        "bias": randn([cols], dtype, device, generator),
        "scale": SCALE,
    }


def reference(inputs, params):
    x, bias, scale = inputs["x"], inputs["bias"].double(), inputs["scale"]
    out = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    # Chunks of rows keep the float64 temporaries (about 4 copies) near 2 GB at the large size.
    step = max(1, (1 << 26) // max(1, x.shape[1]))
    for start in range(0, x.shape[0], step):
        xd = x[start : start + step].double()
        inner = SQRT_2_OVER_PI * (xd + 0.044715 * xd.pow(3))
        out[start : start + step] = (0.5 * xd * (1.0 + torch.tanh(inner)) + bias) * scale
    return out


# FLOPs of the tanh-GELU formula 0.5*x*(1+tanh(c*(x+0.044715*x^3))) per element, counted as
# written: x^3 (2 mul), *0.044715 (1), +x (1), *c (1), tanh (1: counted as ONE FLOP, a single
# MUFU.TANH instruction on sm_75+), 1+ (1), 0.5*x (1), * (1) = 9; then +bias (1) and *scale (1).
FLOPS_PER_ELEMENT = 11


def cost(params, dtype):
    rows, cols, size = params["rows"], params["cols"], element_size(dtype)
    n = rows * cols
    return Cost(
        cuda_flops=FLOPS_PER_ELEMENT * n,  # 9 for tanh-GELU + 1 bias add + 1 scale multiply
        bytes=n * size  # read x
        + cols * size  # read bias once (each row reuses it from L2/L1)
        + n * size,  # write y
    )


# Full-tensor passes (reads + writes) of the unfused chains, one term per kernel they launch.
UNFUSED_PASSES = (
    2  # torch.pow(x, 3): read x, write x^3
    + 2  # 0.044715 * x^3: read, write
    + 3  # x + ...: read x and the product, write
    + 2  # c * (...): read, write
    + 2  # torch.tanh: read, write
    + 2  # 0.5 * x: read x, write
    + 2  # 1.0 + tanh: read, write
    + 3  # (0.5 x) * (1 + tanh): read both, write
    + 2  # + bias: read, write (bias itself is the cols term)
    + 2  # * scale: read, write
)


EAGER_PASSES = 2 + 2 + 2  # F.gelu, + bias, * scale: each reads and writes the full tensor


def _modeled(passes):
    def modeled_bytes(params, dtype):
        size = element_size(dtype)
        return passes * params["rows"] * params["cols"] * size + params["cols"] * size  # + bias read

    return modeled_bytes


FAMILY = Family(
    "gelu",
    summary="y = (tanh-GELU(x) + bias) * 2.0, bias over the last dim",
    sizes={
        "small": [{"rows": 37, "cols": 1000}],
        # 2^28 elements: 1 GiB moved in bf16, 20x the H100's 50 MB L2 (peer row gelu_bias_scale).
        "large": [{"rows": 16384, "cols": 16384}],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
)


def gelu_unfused(x, bias, scale):
    """tanh-GELU spelled out in elementary ops: 8 kernels, then the bias add and the scale."""
    g = 0.5 * x * (1.0 + torch.tanh(SQRT_2_OVER_PI * (x + 0.044715 * torch.pow(x, 3))))
    return (g + bias) * scale


@FAMILY.variant("eager_unfused", modeled_bytes=_modeled(UNFUSED_PASSES))
def eager_unfused(case):
    """tanh-GELU in 8 elementary ops, + bias, * scale: 10 kernels"""
    x, bias, scale = case["x"], case["bias"], case["scale"]
    return lambda: gelu_unfused(x, bias, scale)


def gelu_builtin(x, bias, scale):
    """PyTorch's tanh-GELU op, then the bias add and the scale."""
    return (F.gelu(x, approximate="tanh") + bias) * scale


@FAMILY.variant("eager", modeled_bytes=_modeled(EAGER_PASSES), baseline=True)
def eager(case):
    """F.gelu(approximate='tanh'), + bias, * scale: 3 kernels"""
    x, bias, scale = case["x"], case["bias"], case["scale"]
    return lambda: gelu_builtin(x, bias, scale)


# torch.compile of each natural way to write the chain, each its own row.
@FAMILY.variant("compile_unfused", kind="compile")
def compiled_unfused(case):
    """torch.compile of the unfused chain"""
    x, bias, scale = case["x"], case["bias"], case["scale"]
    fn = torch.compile(gelu_unfused, dynamic=False)
    return lambda: fn(x, bias, scale)


@FAMILY.variant("compile_builtin", kind="compile")
def compiled_builtin(case):
    """torch.compile of F.gelu(approximate='tanh'), + bias, * scale"""
    x, bias, scale = case["x"], case["bias"], case["scale"]
    fn = torch.compile(gelu_builtin, dynamic=False)
    return lambda: fn(x, bias, scale)


def _check_layout(x, bias):
    # The kernels index rows as x + row * cols and bias by column: both must be dense.
    if x.dim() != 2 or not x.is_contiguous():
        raise ValueError(f"expected a contiguous 2-D tensor, got shape {tuple(x.shape)} strides {x.stride()}")
    if tuple(bias.shape) != (x.shape[1],) or not bias.is_contiguous():
        raise ValueError(f"expected a contiguous bias of shape ({x.shape[1]},), got {tuple(bias.shape)}")


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.gelu import cuda, triton  # noqa: E402, F401
