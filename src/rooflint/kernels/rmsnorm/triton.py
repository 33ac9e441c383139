"""rmsnorm: the Triton kernel, one program per row, with the residual add fused in front."""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import gdc_wait, tl, triton
from rooflint.kernels.common.pdl import launch_next, pdl_launch
from rooflint.kernels.rmsnorm import EPS, FAMILY

# Widest row kept in registers as one tile (fp32: 64 KiB over 16 warps, 32 registers a thread).
# Wider rows take the looped path, which reads the row (h) a second time.
MAX_ROW_BLOCK = 16384


@triton.jit
def _rmsnorm_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, hidden, eps,
    BLOCK: tl.constexpr, RESIDUAL: tl.constexpr, ONE_TILE: tl.constexpr, W_FIRST: tl.constexpr = True,
    EVICT: tl.constexpr = False, PDL: tl.constexpr = False,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    start = row * hidden
    if PDL:
        # In a decode step's chain (kernels/common/pdl.py): the next GEMM's blocks come in now and
        # start on their weights while this norm waits for the projection before it.
        launch_next()
    if ONE_TILE:
        # The row in registers: read once, written once; the sum of squares needs no second pass.
        offs = tl.arange(0, BLOCK)
        mask = offs < hidden
        stream: tl.constexpr = "evict_first" if EVICT else ""
        if W_FIRST:  # w's L2 round trip under x's instead of after the reduction (16 more registers a row)
            w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if PDL:  # w is a weight, no kernel writes it: read before the wait; the row after it
            gdc_wait()
        h = tl.load(x_ptr + start + offs, mask=mask, other=0.0, eviction_policy=stream).to(tl.float32)
        if RESIDUAL:
            r = tl.load(r_ptr + start + offs, mask=mask, other=0.0, eviction_policy=stream)
            h_out = (h + r.to(tl.float32)).to(h_ptr.dtype.element_ty)
            tl.store(h_ptr + start + offs, h_out, mask=mask)
            # Normalize the stored (rounded) h, as the next layer's residual stream holds it.
            h = h_out.to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / hidden + eps)
        if not W_FIRST:  # w after the reduction: not live across it, so fewer registers a row
            w = tl.load(w_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last" if EVICT else "").to(
                tl.float32
            )
        tl.store(y_ptr + start + offs, (h * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        # Rows wider than a register tile: a pass for the sum of squares (writing h on the way),
        # then a pass that normalizes, re-reading h. The second read is the price of any width.
        if PDL:
            gdc_wait()
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


# What `rooflint ab --config` may set (rooflint.engine.ab.configs); None: the launcher's choice.
ROW_CONFIG = {"W_FIRST": None, "EVICT": None, "num_warps": None}


def triton_rmsnorm(x, weight, y, residual=None, h=None, *, max_block: int | None = None, eps: float = EPS,
                   config: dict | None = None, pdl: bool = False):  # fmt: skip
    """Launch the kernel over the rows of x; with ``residual``, h = x + residual is written to ``h``
    and normalized. ``max_block`` caps the register tile (tests force the looped path with it);
    ``config``: ROW_CONFIG's names; ``pdl``: launched as a link of a decode step's PDL chain
    (pass kernels.common.pdl.pdl_enabled's answer)."""
    rows, hidden = x.shape
    block = max(triton.next_power_of_2(hidden), 32)  # at least a warp's width
    limit = max_block or MAX_ROW_BLOCK
    one_tile = block <= limit
    block = block if one_tile else limit
    # ~16 elements a thread: loads in flight, few registers, several rows resident per SM.
    warps = min(16, max(1, block // 512))
    has_residual = residual is not None
    given = {name: value for name, value in (config or {}).items() if value is not None}
    # w loaded with x and no eviction hints: each measured faster on an H200 (docs/perf-notes/
    # llm-families.md; `rooflint ab rmsnorm -V triton --config W_FIRST=0,1 --config EVICT=0,1`).
    meta = {"W_FIRST": bool(given.get("W_FIRST", True)), "EVICT": bool(given.get("EVICT", False))}
    _rmsnorm_kernel[(rows,)](
        x, residual if has_residual else x, weight, y, h if has_residual else y, hidden, float(eps),
        BLOCK=block, RESIDUAL=has_residual, ONE_TILE=one_tile, num_warps=int(given.get("num_warps", warps)), **meta,
        PDL=pdl, **pdl_launch(pdl),
    )  # fmt: skip
    return (y, h) if has_residual else y


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case, config=ROW_CONFIG):
    """one Triton program per row, the row in registers, the residual add fused (looped for wide rows)"""
    x, w = case["x"].contiguous(), case["weight"]
    residual = case.inputs.get("residual")
    y = torch.empty_like(x)
    h = torch.empty_like(x) if residual is not None else None
    return lambda: triton_rmsnorm(x, w, y, residual, h, config=config)
