"""gelu: y = (tanh-GELU(x) + bias) * scale, the activation-plus-epilogue chain of an MLP.

Elementwise and memory-bound: 11 FLOPs per element against 4 bytes (bf16 in and out), so the
fused kernels are judged by how close they stream to HBM bandwidth, and the unfused chain by how
many full-tensor trips its separate kernels cost.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC, NEEDS_TRITON, Cost, Family, element_size, randn
from rooflint.core.triton_compat import tl, triton
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype
from rooflint.kernels._gelu import gelu_tanh, mufu_form

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


@triton.jit
def _gelu_bias_scale_kernel(
    x_ptr, bias_ptr, y_ptr, rows, cols, scale, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, MUFU: tl.constexpr
):
    # A [BLOCK_R, BLOCK_C] tile: the bias slice is loaded once per tile and reused by its rows,
    # and the column index comes from the tile, not from a per-element integer modulo.
    pid = tl.program_id(0)
    col_blocks = tl.cdiv(cols, BLOCK_C)
    r = (pid // col_blocks).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)  # int64: n >= 2^31
    c = (pid % col_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = c < cols
    mask = (r < rows)[:, None] & cmask[None, :]
    offsets = r[:, None] * cols + c[None, :]
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(bias_ptr + c, mask=cmask).to(tl.float32)
    # One MUFU op an element for 16-bit data (tanh.approx), two for fp32 (_gelu.py says why).
    y = (gelu_tanh(x, MUFU) + b[None, :]) * scale
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


# Tile shape and warps (tuned on the H100, see docs/perf-notes/gelu-softmax.md): 8192 elements a
# program, so each thread of 8 warps issues four 16-byte loads: enough bytes in flight per SM.
BLOCK_R, BLOCK_C, NUM_WARPS = 8, 1024, 8


def triton_gelu(x, bias, scale, out=None, block_r=None, block_c=None, num_warps=None, mufu=None):
    _check_layout(x, bias)
    rows, cols = x.shape
    out = torch.empty_like(x) if out is None else out
    block_c = block_c or min(BLOCK_C, triton.next_power_of_2(cols))
    block_r = block_r or max(1, min(BLOCK_R * BLOCK_C // block_c, triton.next_power_of_2(rows)))
    grid = (triton.cdiv(rows, block_r) * triton.cdiv(cols, block_c),)
    _gelu_bias_scale_kernel[grid](
        x, bias, out, rows, cols, scale,
        BLOCK_R=block_r, BLOCK_C=block_c, MUFU=mufu_form(x.dtype) if mufu is None else mufu,
        num_warps=num_warps or NUM_WARPS,
    )  # fmt: skip
    return out


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case):
    """one fused Triton pass over [8, 1024] tiles"""
    x, bias, scale = case["x"], case["bias"], case["scale"]
    out = torch.empty_like(x)
    return lambda: triton_gelu(x, bias, scale, out)


def cuda_gelu(x, bias, scale, out=None, rows_in_flight=0):
    _check_layout(x, bias)
    library = cuda_build.load(cuda_build.family_source(__file__))
    out = torch.empty_like(x) if out is None else out
    rows, cols = x.shape
    library.launch("rooflint_gelu", x, bias, out, rows, cols, cuda_dtype(x.dtype), rows_in_flight, float(scale))
    return out


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC))
def cuda_variant(case):
    """CUDA C++, 16-byte vectors, 4 rows in flight a thread, bias held in registers"""
    x, bias, scale = case["x"], case["bias"], case["scale"]
    out = torch.empty_like(x)
    return lambda: cuda_gelu(x, bias, scale, out)
