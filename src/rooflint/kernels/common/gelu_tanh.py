"""tanh GELU for the Triton kernels: 0.5 z (1 + tanh(u)), u = sqrt(2/pi) (z + 0.044715 z^3).

Two forms, as in include/rooflint/common.cuh for the CUDA kernels. Both are a few FMAs around the
MUFU, the SM's 16-lane special-function unit, which is what a GELU epilogue spends: on the H200
(4.8 TB/s over the H100's 132 SMs) the elementwise GELU kernels kept it ~50% busy (ncu,
at 85145dc), and in a GEMM epilogue it is a tile's serial tail.

- ``gelu_tanh_sigmoid``: z * sigmoid(2u) = z / (1 + 2^(z (c1 + c3 z^2))), log2(e) folded into the
  constants: MUFU ex2 and an approximate divide (MUFU rcp). Exact in real arithmetic; for z << 0
  ex2 overflows to inf and the divide gives -0, the limit. The fp32 form, and the only one the CPU
  interpreter can run (it runs no PTX).
- ``gelu_tanh_mufu``: tanh.approx.f32, ONE MUFU op. Its relative error (2^-10.99) is below bf16's
  rounding and inside fp16's tolerance, not fp32's; for z << 0 it returns -1 and GELU 0.
"""

from __future__ import annotations

import torch

from rooflint.core.triton_compat import interpreting, tl, triton

GELU_C1 = tl.constexpr(-2.0 * 0.7978845608028654 * 1.4426950408889634)  # -2 sqrt(2/pi) log2(e)
GELU_C3 = tl.constexpr(-2.0 * 0.7978845608028654 * 1.4426950408889634 * 0.044715)
GELU_K0 = tl.constexpr(0.7978845608028654)  # sqrt(2/pi)
GELU_K1 = tl.constexpr(0.7978845608028654 * 0.044715)


def mufu_form(dtype: torch.dtype) -> bool:
    """Whether a kernel writing ``dtype`` takes the one-MUFU form: 16-bit data on a GPU."""
    return dtype in (torch.float16, torch.bfloat16) and not interpreting()


@triton.jit
def gelu_tanh_sigmoid(z):
    return tl.fdiv(z, 1.0 + tl.exp2(z * (GELU_C1 + GELU_C3 * z * z)), ieee_rounding=False)


@triton.jit
def gelu_tanh_mufu(z):
    t = tl.inline_asm_elementwise(
        "tanh.approx.f32 $0, $1;", "=r,r", [z * (GELU_K0 + GELU_K1 * z * z)], dtype=tl.float32, is_pure=True, pack=1
    )
    half = 0.5 * z
    return half + half * t


@triton.jit
def gelu_tanh(z, MUFU: tl.constexpr):
    """GELU of fp32 ``z``; MUFU (from ``mufu_form`` on the host): the one-MUFU form."""
    if MUFU:
        g = gelu_tanh_mufu(z)
    else:
        g = gelu_tanh_sigmoid(z)
    return g
