"""layernorm: y = (x - mean) * rstd * w + b over the last dim, saving mean and rstd for backward.

Memory-bound: one read of x and one write of y dominate (w and b are re-read by every row from
cache). The kernels here are shared with layernorm_gelu, which sets GELU and drops the statistics.
"""

from __future__ import annotations

import torch

from rooflint.core.family import Cost, Family, element_size, randn

EPS = 1e-5


# Widest row the Triton kernel keeps in registers as one tile (fp32: 64 KiB over 16 warps, 32
# registers a thread). Wider rows take the looped kernel, which reads x twice.
MAX_FUSED_BLOCK = 16384


def make_inputs(params, dtype, device, generator):
    rows, hidden = params["rows"], params["hidden"]
    return {
        "x": randn([rows, hidden], dtype, device, generator),
        "weight": randn([hidden], dtype, device, generator),
        "bias": randn([hidden], dtype, device, generator),
    }


def reference_normalized(inputs):
    """float64 (w * (x - mean) * rstd + b, mean, rstd) from the definitions."""
    x = inputs["x"].double()
    mean = x.mean(dim=-1)
    centered = x - mean[:, None]
    rstd = 1.0 / torch.sqrt((centered * centered).mean(dim=-1) + EPS)
    y = centered * rstd[:, None] * inputs["weight"].double() + inputs["bias"].double()
    return y, mean, rstd


def reference(inputs, params):
    return reference_normalized(inputs)


def cost(params, dtype):
    rows, hidden, size = params["rows"], params["hidden"], element_size(dtype)
    n = rows * hidden
    return Cost(
        # per element: add into the mean, subtract it, square and add for the variance,
        # scale by rstd, by w, add b; per row: two divisions by n, + eps, rsqrt
        cuda_flops=7 * n + 4 * rows,
        bytes=n * size  # read x
        + 2 * hidden * size  # read w and b once (every row re-reads them from cache)
        + n * size  # write y
        + 2 * rows * 4,  # write mean and rstd (fp32)
    )


def layernorm_unfused_fp32(x, weight, bias):
    """LayerNorm as separate PyTorch ops in fp32; returns fp32 (normalized affine, mean, rstd)."""
    xf = x.float()
    mean = xf.mean(dim=-1, keepdim=True)
    centered = xf - mean
    var = (centered * centered).mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(var + EPS)
    return centered * rstd * weight + bias, mean.squeeze(-1), rstd.squeeze(-1)


def layernorm_unfused(x, weight, bias):
    y, mean, rstd = layernorm_unfused_fp32(x, weight, bias)
    return y.to(x.dtype), mean, rstd


def unfused_trip_bytes(params, dtype):
    """HBM bytes of layernorm_unfused_fp32, one term per kernel; n-sized fp32 temporaries throughout."""
    rows, hidden, size = params["rows"], params["hidden"], element_size(dtype)
    n, f = rows * hidden, 4
    upcast = 0 if size == f else n * size + n * f  # x.float(): read x, write fp32 copy (a no-op for fp32)
    return (
        upcast
        + n * f  # mean: read xf
        + 2 * n * f  # xf - mean: read xf, write centered
        + 2 * n * f  # centered * centered: read, write
        + n * f  # mean of squares: read
        + 4 * rows * f  # var + eps, rsqrt: per-row vectors, read and write each
        + 2 * n * f  # * rstd: read centered, write
        + 2 * n * f  # * weight: read, write
        + hidden * size  # read weight
        + 2 * n * f  # + bias: read, write
        + hidden * size  # read bias
        + 2 * rows * f  # the two mean reductions write their per-row results
    )


FAMILY = Family(
    "layernorm",
    summary="LayerNorm forward over the last dim with weight and bias; returns (y, mean, rstd)",
    sizes={
        "small": [{"rows": 512, "hidden": 1000}],
        # 64 Mi elements: 256 MiB moved in bf16, 5x the H100's 50 MB L2; a Llama-7B-like hidden size.
        "large": [{"rows": 16384, "hidden": 4096}],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
)


@FAMILY.variant(
    "eager_unfused",
    # plus the final downcast: read the fp32 y, write y (none for fp32)
    modeled_bytes=lambda p, d: (
        unfused_trip_bytes(p, d) + (0 if element_size(d) == 4 else p["rows"] * p["hidden"] * (4 + element_size(d)))
    ),
)
def eager_unfused(case):
    """mean, subtract, square, mean, rsqrt, scale, *w, +b as separate fp32 ops"""
    x, w, b = case["x"], case["weight"], case["bias"]
    return lambda: layernorm_unfused(x, w, b)


def layernorm_builtin(x, weight, bias):
    # F.layer_norm drops mean and rstd; native_layer_norm is the op it calls and that autograd
    # saves them from, so this is PyTorch's built-in doing exactly our work, no extra pass.
    y, mean, rstd = torch.native_layer_norm(x, [x.shape[-1]], weight, bias, EPS)
    return y, mean.float().view(-1), rstd.float().view(-1)


@FAMILY.variant("eager", baseline=True)
def eager(case):
    """torch.native_layer_norm: F.layer_norm's kernel, which also returns mean and rstd"""
    x, w, b = case["x"], case["weight"], case["bias"]
    return lambda: layernorm_builtin(x, w, b)


# torch.compile of each natural way to write LayerNorm, each its own row.
@FAMILY.variant("compile_unfused", kind="compile")
def compiled_unfused(case):
    """torch.compile of the unfused fp32 form"""
    x, w, b = case["x"], case["weight"], case["bias"]
    fn = torch.compile(layernorm_unfused, dynamic=False)
    return lambda: fn(x, w, b)


@FAMILY.variant("compile_builtin", kind="compile")
def compiled_builtin(case):
    """torch.compile of torch.native_layer_norm (inductor decomposes it into one fused reduction)"""
    x, w, b = case["x"], case["weight"], case["bias"]
    fn = torch.compile(layernorm_builtin, dynamic=False)
    return lambda: fn(x, w, b)


def _outputs(x):
    rows = x.shape[0]
    stats = [torch.empty(rows, dtype=torch.float32, device=x.device) for _ in range(2)]
    return torch.empty_like(x), *stats


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.layernorm import cuda, library, triton  # noqa: E402, F401
