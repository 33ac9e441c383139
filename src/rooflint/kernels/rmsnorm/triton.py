"""rmsnorm: the Triton kernel, one program per row, with the residual add fused in front."""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import tl, triton
from rooflint.kernels.rmsnorm import EPS, FAMILY

# Widest row kept in registers as one tile (fp32: 64 KiB over 16 warps, 32 registers a thread).
# Wider rows take the looped path, which reads the row (h) a second time.
MAX_ROW_BLOCK = 16384


@triton.jit
def _rmsnorm_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, hidden, eps,
    BLOCK: tl.constexpr, RESIDUAL: tl.constexpr, ONE_TILE: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    start = row * hidden
    if ONE_TILE:
        # The row in registers: read once, written once; the sum of squares needs no second pass.
        offs = tl.arange(0, BLOCK)
        mask = offs < hidden
        h = tl.load(x_ptr + start + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        if RESIDUAL:
            r = tl.load(r_ptr + start + offs, mask=mask, other=0.0, eviction_policy="evict_first")
            h_out = (h + r.to(tl.float32)).to(h_ptr.dtype.element_ty)
            tl.store(h_ptr + start + offs, h_out, mask=mask)
            # Normalize the stored (rounded) h, as the next layer's residual stream holds it.
            h = h_out.to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / hidden + eps)
        # w after the reduction: not live across it, so fewer registers and more rows per SM.
        w = tl.load(w_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        tl.store(y_ptr + start + offs, (h * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        # Rows wider than a register tile: a pass for the sum of squares (writing h on the way),
        # then a pass that normalizes, re-reading h. The second read is the price of any width.
        total = tl.zeros([BLOCK], dtype=tl.float32)
        for tile in range(0, hidden, BLOCK):
            offs = tile + tl.arange(0, BLOCK)
            mask = offs < hidden
            h = tl.load(x_ptr + start + offs, mask=mask, other=0.0).to(tl.float32)
            if RESIDUAL:
                h = h + tl.load(r_ptr + start + offs, mask=mask, other=0.0).to(tl.float32)
                h_out = h.to(h_ptr.dtype.element_ty)
                tl.store(h_ptr + start + offs, h_out, mask=mask)
                h = h_out.to(tl.float32)
            total += h * h
        rstd = 1.0 / tl.sqrt(tl.sum(total, axis=0) / hidden + eps)
        source = h_ptr if RESIDUAL else x_ptr
        for tile in range(0, hidden, BLOCK):
            offs = tile + tl.arange(0, BLOCK)
            mask = offs < hidden
            h = tl.load(source + start + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_ptr + start + offs, (h * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def triton_rmsnorm(x, weight, y, residual=None, h=None, *, max_block: int | None = None, eps: float = EPS):
    """Launch the kernel over the rows of x; with ``residual``, h = x + residual is written to ``h``
    and normalized. ``max_block`` caps the register tile (tests force the looped path with it)."""
    rows, hidden = x.shape
    block = max(triton.next_power_of_2(hidden), 32)  # at least a warp's width
    limit = max_block or MAX_ROW_BLOCK
    one_tile = block <= limit
    block = block if one_tile else limit
    # ~16 elements a thread: loads in flight, few registers, several rows resident per SM.
    warps = min(16, max(1, block // 512))
    has_residual = residual is not None
    _rmsnorm_kernel[(rows,)](
        x, residual if has_residual else x, weight, y, h if has_residual else y, hidden, float(eps),
        BLOCK=block, RESIDUAL=has_residual, ONE_TILE=one_tile, num_warps=warps,
    )  # fmt: skip
    return (y, h) if has_residual else y


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case):
    """one Triton program per row, the row in registers, the residual add fused (looped for wide rows)"""
    x, w = case["x"].contiguous(), case["weight"]
    residual = case.inputs.get("residual")
    y = torch.empty_like(x)
    h = torch.empty_like(x) if residual is not None else None
    return lambda: triton_rmsnorm(x, w, y, residual, h)
