"""attention: the library peers, FlashAttention-4 (CuTe DSL) and FlashAttention-2/3 where installed.

Each takes q, k, v as [batch, seq, heads, head_dim]; rooflint's are [batch, heads, seq, head_dim],
so each variant transposes them once when it is built (not timed) and hands the library its own
layout; the output is viewed back, with no copy. fp8 inputs (fp8.py) go to FlashAttention-3 on Hopper
and FlashAttention-4 on Blackwell as e4m3 codes with their scales as the libraries' descale tensors.
"""

from __future__ import annotations

import functools
import inspect

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.kernels.attention import FAMILY, fp8
from rooflint.kernels.attention.fp8 import HALF_DTYPES
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


def _with_descales(case, attend, library: str):
    """``attend`` with q/k/v_descale bound: one fp32 per (batch, kv head), each the tensor's scale
    (the libraries' descale layout), where the library's function takes them."""
    if "q_descale" not in inspect.signature(attend).parameters:
        raise VariantSkipped(f"this {library} has no fp8 inputs (its flash_attn_func takes no q_descale)")
    b, kv_heads = case["k"].shape[:2]
    descales = {
        f"{name}_descale": case[scale].float().reshape(1, 1).expand(b, kv_heads).contiguous()
        for name, scale in zip(("q", "k", "v"), fp8.SCALES)
    }
    return functools.partial(attend, **descales)


def _capability(case) -> tuple[int, int]:
    return torch.cuda.get_device_capability(case.device) if case.device.type == "cuda" else (0, 0)


@FAMILY.variant("flash_attn_4", library=FLASH_ATTN_4)
def flash_attn_4(case):
    """FlashAttention-4: flash_attn.cute.flash_attn_func (CuTe DSL; Hopper and Blackwell; fp8 on Blackwell)"""
    attend = FLASH_ATTN_4.function("", "flash_attn_func")
    if fp8.is_fp8(case["q"].dtype):
        if _capability(case) < (10, 0):
            raise VariantSkipped(
                "FlashAttention-4's fp8 forward runs on Blackwell (sm_100) only; on Hopper the fp8 peer is "
                "FlashAttention-3 (flash_attn_3)"
            )
        attend = _with_descales(case, attend, "FlashAttention-4")
    return _bind(case, attend)


@FAMILY.variant("flash_attn_3", library=FLASH_ATTN_3)
def flash_attn_3(case):
    """FlashAttention-3: flash_attn_interface.flash_attn_func (Hopper only; fp8 with q/k/v_descale)"""
    attend = FLASH_ATTN_3.function("", "flash_attn_func")
    if fp8.is_fp8(case["q"].dtype):
        attend = _with_descales(case, attend, "FlashAttention-3")
    return _bind(case, attend)


@FAMILY.variant("flash_attn_2", library=FLASH_ATTN_2, dtypes=HALF_DTYPES)
def flash_attn_2(case):
    """FlashAttention-2: flash_attn.flash_attn_func (Ampere and newer)"""
    return _bind(case, FLASH_ATTN_2.function("", "flash_attn_func"))
