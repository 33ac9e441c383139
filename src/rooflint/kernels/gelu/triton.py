"""gelu: triton implementation."""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import tl, triton
from rooflint.kernels.common.gelu_tanh import gelu_tanh, mufu_form
from rooflint.kernels.gelu import FAMILY, _check_layout


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
    # One MUFU op an element for 16-bit data (tanh.approx), two for fp32 (common/gelu_tanh.py says why).
    y = (gelu_tanh(x, MUFU) + b[None, :]) * scale
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


# Tile shape and warps (tuned on the H100 at e33be2e; docs/perf-notes/memory-bound.md): 8192 elements a
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
