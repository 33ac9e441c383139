"""swiglu: the Triton kernel, one pass over gate and up with the math in fp32; for the projected form,
after cuBLAS's x Wᵀ, over the two halves of its output in place."""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import tl, triton
from rooflint.kernels.swiglu import FAMILY, projected_bytes

# Elements a program covers: 2048 divides Llama's 14336 (7 programs a row, no partial tile) and keeps
# 8 bytes of each 16-bit input per thread per load at 8 warps.
BLOCK = 2048
NUM_WARPS = 8


@triton.jit
def _silu_mul(gate, up):
    # silu(g) = g / (1 + e^-g) with ex2 (one MUFU op) and the approximate divide (rcp + one multiply,
    # 2 ulp in fp32, far below a 16-bit output's rounding): the IEEE divide is a dozen instructions
    # and a slow-path branch an element, enough to make an elementwise kernel that should stream at
    # the HBM rate issue-bound.
    gate = gate.to(tl.float32)
    sig = tl.fdiv(1.0, 1.0 + tl.exp2(gate * -1.4426950408889634), ieee_rounding=False)  # e^-g = 2^(-g log2 e)
    return gate * sig * up.to(tl.float32)


@triton.jit
def _swiglu_flat_kernel(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # Contiguous gate, up and out: one flat index, no per-row address arithmetic.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    gate = tl.load(gate_ptr + offs, mask=mask, other=0.0)
    up = tl.load(up_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, _silu_mul(gate, up).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_rows_kernel(gate_ptr, up_ptr, out_ptr, cols, in_stride, out_stride, BLOCK: tl.constexpr):
    # gate and up as column slices of one [rows, 2 * cols] tensor (a projection's two halves).
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < cols
    gate = tl.load(gate_ptr + row * in_stride + offs, mask=mask, other=0.0)
    up = tl.load(up_ptr + row * in_stride + offs, mask=mask, other=0.0)
    tl.store(out_ptr + row * out_stride + offs, _silu_mul(gate, up).to(out_ptr.dtype.element_ty), mask=mask)


def triton_swiglu(gate, up, out, *, block: int | None = None, num_warps: int = NUM_WARPS):
    """out = silu(gate) * up over [rows, cols]; gate and up may be column slices of one tensor (the
    halves of a projection), sharing a row stride; out is contiguous."""
    rows, cols = gate.shape
    assert gate.stride() == up.stride() and gate.stride(1) == 1 and out.is_contiguous()
    if gate.is_contiguous():
        n = rows * cols
        block = block or min(BLOCK, max(triton.next_power_of_2(n), 128))
        _swiglu_flat_kernel[(triton.cdiv(n, block),)](gate, up, out, n, BLOCK=block, num_warps=num_warps)
        return out
    block = block or min(BLOCK, max(triton.next_power_of_2(cols), 128))
    grid = (rows, triton.cdiv(cols, block))
    _swiglu_rows_kernel[grid](gate, up, out, cols, gate.stride(0), out.stride(0), BLOCK=block, num_warps=num_warps)
    return out


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON), modeled_bytes=projected_bytes)
def triton_variant(case):
    """one Triton pass: read gate and up, write silu(gate) * up, the math in fp32 (after cuBLAS x Wᵀ
    for x, W, reading the two halves of its output)"""
    params = case.params
    if params["hidden"]:
        x, w = case["x"], case["weight"]
        out = torch.empty(params["rows"], params["inter"], dtype=x.dtype, device=x.device)

        def projected():
            gate, up = (x @ w.T).chunk(2, dim=-1)
            return triton_swiglu(gate, up, out)

        return projected
    gate, up = case["gate"].contiguous(), case["up"].contiguous()
    out = torch.empty_like(gate)
    return lambda: triton_swiglu(gate, up, out)
