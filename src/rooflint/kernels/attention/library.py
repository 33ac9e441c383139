"""attention: the library peers, FlashAttention-4 (CuTe DSL) and FlashAttention-2/3 where installed.

Each takes q, k, v as [batch, seq, heads, head_dim]; rooflint's are [batch, heads, seq, head_dim],
so each variant transposes them once when it is built (not timed) and hands the library its own
layout; the output is viewed back, with no copy.
"""

from __future__ import annotations

from rooflint.kernels.attention import FAMILY
from rooflint.kernels.common.libraries import FLASH_ATTN_2, FLASH_ATTN_3, FLASH_ATTN_4


def _bshd(case):
    return tuple(case[name].transpose(1, 2).contiguous() for name in ("q", "k", "v"))


def _out(result):
    """[B, N, H, D] back to rooflint's [B, H, N, D], as a view; FA4 and some FA3 releases return (out, lse)."""
    out = result[0] if isinstance(result, tuple) else result
    return out.transpose(1, 2)


def _bind(case, attend):
    q, k, v = _bshd(case)
    causal = bool(case.params["causal"])
    return lambda: _out(attend(q, k, v, causal=causal))


@FAMILY.variant("flash_attn_4", library=FLASH_ATTN_4)
def flash_attn_4(case):
    """FlashAttention-4: flash_attn.cute.flash_attn_func (CuTe DSL; Hopper and Blackwell)"""
    return _bind(case, FLASH_ATTN_4.function("", "flash_attn_func"))


@FAMILY.variant("flash_attn_3", library=FLASH_ATTN_3)
def flash_attn_3(case):
    """FlashAttention-3: flash_attn_interface.flash_attn_func (Hopper only)"""
    return _bind(case, FLASH_ATTN_3.function("", "flash_attn_func"))


@FAMILY.variant("flash_attn_2", library=FLASH_ATTN_2)
def flash_attn_2(case):
    """FlashAttention-2: flash_attn.flash_attn_func (Ampere and newer)"""
    return _bind(case, FLASH_ATTN_2.function("", "flash_attn_func"))
