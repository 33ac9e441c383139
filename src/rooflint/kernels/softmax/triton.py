"""softmax: triton implementation."""

from __future__ import annotations

from types import MappingProxyType

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import tl, triton
from rooflint.kernels.softmax import FAMILY, _check_layout


@triton.jit
def _softmax_rows_kernel(x_ptr, y_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # BLOCK_R whole rows per program, held in registers from load to store: one HBM read and one
    # write per element, the floor. Padding lanes load -inf so they add nothing to max or sum.
    r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.arange(0, BLOCK_C)
    row_ok = r < rows
    mask = row_ok[:, None] & (c < cols)[None, :]
    offsets = r[:, None] * cols + c[None, :]
    x = tl.load(x_ptr + offsets, mask=mask, other=float("-inf")).to(tl.float32)
    # Rows past the end (all padding) get max 0 and sum 1, so they stay NaN-free.
    m = tl.where(row_ok, tl.max(x, axis=1), 0.0)
    e = tl.exp(x - m[:, None])
    inv = 1.0 / tl.where(row_ok, tl.sum(e, axis=1), 1.0)
    tl.store(y_ptr + offsets, (e * inv[:, None]).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_looped_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    # Rows too wide for registers: pass 1 keeps a running max and a running sum rescaled to it
    # per lane (online softmax), pass 2 re-reads the row and writes. Two reads and one write per
    # element; for rows up to ~64 KB the re-read of a row just streamed mostly hits L2 (all
    # rows in flight fit in its 50 MB), for 256 KB rows much of it goes back to HBM.
    base = tl.program_id(0).to(tl.int64) * cols
    lanes = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, cols, BLOCK):
        mask = start + lanes < cols
        x = tl.load(x_ptr + base + start + lanes, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # lanes with no data yet stay 0
        s = s * tl.exp(m - shift) + tl.exp(x - shift)
        m = m_new
    row_max = tl.max(m, axis=0)
    inv = 1.0 / tl.sum(s * tl.exp(m - row_max), axis=0)
    for start in range(0, cols, BLOCK):
        mask = start + lanes < cols
        x = tl.load(x_ptr + base + start + lanes, mask=mask, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - row_max) * inv
        tl.store(y_ptr + base + start + lanes, y.to(y_ptr.dtype.element_ty), mask=mask)


# Widest row kept in registers: 32768 fp32 values over 32 warps is 32 a thread; wider rows
# would spill, so they take the looped kernel. On the H100 at 32768 bf16 columns the register
# path ran 0.372 ms against 0.534 ms looped (e33be2e).
MAX_FUSED_COLS = 32768


LOOP_BLOCK = 4096


def _row_warps(elements: int) -> int:
    # About 32 fp32 values a thread: registers stay well under the spill limit while each
    # thread still has several 16-byte loads in flight.
    return max(1, min(32, elements // 1024))


def triton_softmax(x, out=None, max_fused_cols=MAX_FUSED_COLS, loop_block=LOOP_BLOCK, num_warps=None, block_r=None):
    """Rows up to ``max_fused_cols`` wide in registers (``block_r`` rows a program, None: from the
    shape), wider ones looped ``loop_block`` at a time."""
    _check_layout(x)
    rows, cols = x.shape
    out = torch.empty_like(x) if out is None else out
    if cols <= max_fused_cols:
        block_c = triton.next_power_of_2(cols)
        # Narrow rows: several per program, so each program still moves a few KB.
        block_r = block_r or max(1, min(2048 // block_c, triton.next_power_of_2(rows)))
        warps = num_warps or _row_warps(block_c * block_r)
        grid = (triton.cdiv(rows, block_r),)
        _softmax_rows_kernel[grid](x, out, rows, cols, BLOCK_R=block_r, BLOCK_C=block_c, num_warps=warps)
    else:
        _softmax_looped_kernel[(rows,)](x, out, cols, BLOCK=loop_block, num_warps=num_warps or 8)
    return out


# What `rooflint ab --config` may set (the protocol of rooflint.engine.ab.configs); None keeps the
# choice triton_softmax makes from the shape. BLOCK_R: rows a program on the register path (a power
# of 2); BLOCK: the looped kernel's chunk of a row; num_warps: either kernel's warps.
TRITON_CONFIG = MappingProxyType({"BLOCK_R": None, "BLOCK": LOOP_BLOCK, "num_warps": None})


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case, config=TRITON_CONFIG):
    """Triton: row in registers up to 32768 cols, online two-pass beyond"""
    x = case["x"]
    out = torch.empty_like(x)
    block_r, loop_block, warps = config["BLOCK_R"], config["BLOCK"], config["num_warps"]
    return lambda: triton_softmax(x, out, loop_block=loop_block, num_warps=warps, block_r=block_r)
