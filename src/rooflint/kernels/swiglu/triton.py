"""swiglu: the Triton kernel, one pass over gate and up with the math in fp32; for the projected form,
after cuBLAS's x Wᵀ, over the two halves of its output in place."""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import tl, triton
from rooflint.kernels.swiglu import FAMILY, projected_bytes

# Columns a program covers: 2048 divides Llama's 14336 (7 programs a row, no partial tile) and keeps
# 8 bytes of each 16-bit input per thread per load at 8 warps.
BLOCK = 2048


@triton.jit
def _swiglu_kernel(gate_ptr, up_ptr, out_ptr, cols, in_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < cols
    # evict_first: each byte is touched once; nothing here is worth keeping in L2.
    gate = tl.load(gate_ptr + row * in_stride + offs, mask=mask, other=0.0, eviction_policy="evict_first")
    up = tl.load(up_ptr + row * in_stride + offs, mask=mask, other=0.0, eviction_policy="evict_first")
    gate = gate.to(tl.float32)
    out = gate / (1.0 + tl.exp(-gate)) * up.to(tl.float32)
    tl.store(out_ptr + row * out_stride + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def triton_swiglu(gate, up, out, *, block: int | None = None):
    """out = silu(gate) * up over [rows, cols]; gate and up may be column slices of one tensor (the
    halves of a projection), sharing a row stride; out is contiguous."""
    rows, cols = gate.shape
    assert gate.stride() == up.stride() and gate.stride(1) == 1 and out.is_contiguous()
    block = block or min(BLOCK, max(triton.next_power_of_2(cols), 128))
    grid = (rows, triton.cdiv(cols, block))
    _swiglu_kernel[grid](gate, up, out, cols, gate.stride(0), out.stride(0), BLOCK=block, num_warps=8)
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
