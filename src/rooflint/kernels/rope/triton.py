"""rope: triton implementation."""

from __future__ import annotations

import math

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import tl, triton
from rooflint.kernels.rope import FAMILY, THETA, _table_modeled


@triton.jit
def _rotate_store(o_ptr, offs, half, mask, x1, x2, c, s):
    x1 = x1.to(tl.float32)
    x2 = x2.to(tl.float32)
    tl.store(o_ptr + offs, (x1 * c - x2 * s).to(o_ptr.dtype.element_ty), mask=mask)
    tl.store(o_ptr + offs + half, (x2 * c + x1 * s).to(o_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_kernel(
    q_ptr, k_ptr, qo_ptr, ko_ptr, cos_ptr, sin_ptr, seq, heads, half, neg_log2_theta_over_half,
    FUSED: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    # One program per (batch, position) and block of heads: cos/sin for the position are loaded
    # (or computed) once and reused by every head in the tile and by both q and k.
    token = tl.program_id(0)  # b * seq + s
    pos = token % seq
    d = tl.arange(0, BLOCK_D)
    d_mask = d < half
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    # int64: b*s*h*d reaches 2^31 at realistic sizes (the large case is 2^30 per tensor).
    offs = (token.to(tl.int64) * heads + h[:, None]) * (2 * half) + d[None, :]
    mask = (h[:, None] < heads) & d_mask[None, :]
    # All four tiles are loaded before cos/sin and before any store. Memory operations keep program
    # order (a load of k may alias a store to qo), so a k load written after q's stores would wait
    # for them, and sin/cos written first would delay every load by their latency; this way the
    # program has all its bytes in flight at once and the cos/sin work hides under them.
    q1 = tl.load(q_ptr + offs, mask=mask)
    q2 = tl.load(q_ptr + offs + half, mask=mask)
    k1 = tl.load(k_ptr + offs, mask=mask)
    k2 = tl.load(k_ptr + offs + half, mask=mask)
    if FUSED:
        # inv_freq_i = theta^(-i/half) = 2^(-i * log2(theta) / half); tl.cos/tl.sin lower to libdevice's
        # cosf/sinf, which range-reduce correctly at angles of thousands of radians.
        angle = pos.to(tl.float32) * tl.exp2(d.to(tl.float32) * neg_log2_theta_over_half)
        c = tl.cos(angle)
        s = tl.sin(angle)
    else:
        c = tl.load(cos_ptr + pos * half + d, mask=d_mask)
        s = tl.load(sin_ptr + pos * half + d, mask=d_mask)
    _rotate_store(qo_ptr, offs, half, mask, q1, q2, c[None, :], s[None, :])
    _rotate_store(ko_ptr, offs, half, mask, k1, k2, c[None, :], s[None, :])


def triton_rope(q, k, cos, sin, q_out, k_out, fused: bool, tile=None, num_warps=None):
    b, s, h, d = q.shape
    half = d // 2
    block_d = triton.next_power_of_2(half)
    # Four tiles a program (q1, q2, k1, k2), all loaded at once. By form (ptxas for sm_90, [32, 128]
    # bf16; fractions of the measured ceiling or of the default's time):
    # - table: ~2K elements a half-tile (16 KB of bf16 a program), 8 warps, one 16-byte vector per
    #   thread per tile (4 warps, 2 rows a thread, keep fewer loads in flight);
    # - fused: each thread computes sin/cos for its own columns, which its rows share. 4K elements at
    #   8 warps (2 rows a thread): twice the bytes in flight a program for the same trig per row.
    tile = tile or (4096 if fused else 2048)
    num_warps = num_warps or 8
    block_h = min(triton.next_power_of_2(h), max(1, tile // block_d))
    grid = (b * s, triton.cdiv(h, block_h))
    neg = -math.log2(THETA) / half
    _rope_kernel[grid](q, k, q_out, k_out, cos, sin, s, h, half, neg, FUSED=fused, BLOCK_H=block_h, BLOCK_D=block_d,
                       num_warps=num_warps)  # fmt: skip
    return q_out, k_out


def _triton_runner(case, fused):
    q, k, cos, sin = case["q"], case["k"], case["cos"], case["sin"]
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    return lambda: triton_rope(q, k, cos, sin, q_out, k_out, fused)


@FAMILY.variant("triton_table", kind="triton", needs=(NEEDS_CUDA, NEEDS_TRITON), modeled_bytes=_table_modeled)
def triton_table(case):
    """one Triton kernel, cos/sin loaded from the fp32 table once per position"""
    return _triton_runner(case, fused=False)


@FAMILY.variant("triton_fused", kind="triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_fused(case):
    """one Triton kernel, sin/cos computed in-kernel once per position"""
    return _triton_runner(case, fused=True)
