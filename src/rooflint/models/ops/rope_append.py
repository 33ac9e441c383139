"""RoPE of a Llama-family QKV output, in place, with the new K and V written to the paged KV cache.

The QKV projection's output [rows, (H + 2 H_kv) D] holds each token's q heads, then its K heads,
then its V heads. Hugging Face rotates q and k with about ten PyTorch ops (two multiplies, a
negate, a concatenation and an add for each of q and k, plus the views) and a decode step then
copies K and V into the cache with one more kernel: eleven launches that each read or write a few
kilobytes, ~30 us of a decode step's gaps per layer. Here one program takes one token row: it
reads the row's q and K heads as their two halves (rotate-half pairs element i with i + D/2),
rotates them in fp32 with the position's cos and sin, rounds once and writes them back where
they were (so the attention reads q, k and v as views of the same buffer, as before), and, with a
cache, writes the rotated K and the V heads into their slots. One kernel, one pass over the row.

Rounding: HF multiplies and adds in the model's dtype (each product rounded); here the rotation is
in fp32 and rounded once, which is closer to the float64 reference.
"""

from __future__ import annotations

import torch

from rooflint.core.triton_compat import tl, triton


@triton.jit
def _rope_append_kernel(
    qkv_ptr, cos_ptr, sin_ptr, slot_ptr, k_pool_ptr, v_pool_ptr,
    qkv_row, tokens, start,
    HEADS: tl.constexpr, KV_HEADS: tl.constexpr, HALF: tl.constexpr, BLOCK_H: tl.constexpr,
    APPEND: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    position = start + row % tokens  # rows are (sequence, token): token row % tokens of its sequence
    head = tl.arange(0, BLOCK_H)
    i = tl.arange(0, HALF)
    rotated = head < HEADS + KV_HEADS  # q heads, then K heads
    base = qkv_ptr + row.to(tl.int64) * qkv_row
    first = base + head[:, None] * (2 * HALF) + i[None, :]
    x1 = tl.load(first, mask=rotated[:, None], other=0.0).to(tl.float32)
    x2 = tl.load(first + HALF, mask=rotated[:, None], other=0.0).to(tl.float32)
    # the tables hold cat(freqs, freqs): the first half's cos and sin serve both halves
    cos = tl.load(cos_ptr + position * (2 * HALF) + i).to(tl.float32)[None, :]
    sin = tl.load(sin_ptr + position * (2 * HALF) + i).to(tl.float32)[None, :]
    y1 = (x1 * cos - x2 * sin).to(qkv_ptr.dtype.element_ty)
    y2 = (x2 * cos + x1 * sin).to(qkv_ptr.dtype.element_ty)
    tl.store(first, y1, mask=rotated[:, None])
    tl.store(first + HALF, y2, mask=rotated[:, None])
    if APPEND:
        # K head j of this row is head HEADS + j above; its V is head HEADS + KV_HEADS + j
        j = head - HEADS
        is_k = (head >= HEADS) & rotated
        slot = tl.load(slot_ptr + row.to(tl.int64) * KV_HEADS + j, mask=is_k, other=0).to(tl.int64)
        dst = slot[:, None] * (2 * HALF) + i[None, :]
        tl.store(k_pool_ptr + dst, y1, mask=is_k[:, None])
        tl.store(k_pool_ptr + dst + HALF, y2, mask=is_k[:, None])
        v_src = base + (head + KV_HEADS)[:, None] * (2 * HALF) + i[None, :]
        v1 = tl.load(v_src, mask=is_k[:, None], other=0.0)
        v2 = tl.load(v_src + HALF, mask=is_k[:, None], other=0.0)
        tl.store(v_pool_ptr + dst, v1, mask=is_k[:, None])
        tl.store(v_pool_ptr + dst + HALF, v2, mask=is_k[:, None])


def rope_append(
    qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    tokens: int,
    start: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    append: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Rotate the q and K heads of ``qkv`` [rows, (H + 2 H_kv) D] in place (row r is token
    r % tokens, at position start + r % tokens); ``cos``/``sin`` are the whole [positions, D]
    tables. ``append`` = (slots [rows * H_kv] int64, K pool [slots, D], V pool [slots, D]) also
    writes the rotated K and the V heads into the cache. Returns ``qkv``."""
    rows, width = qkv.shape
    if width != (heads + 2 * kv_heads) * head_dim or qkv.stride(1) != 1:
        raise ValueError(f"qkv must be [rows, {(heads + 2 * kv_heads) * head_dim}] with unit column stride")
    if head_dim % 2 or head_dim & (head_dim - 1):
        raise ValueError(f"head_dim {head_dim} is not a power of two")
    slots, k_pool, v_pool = append if append is not None else (qkv, qkv, qkv)
    block_h = triton.next_power_of_2(heads + kv_heads)
    # ~32 elements a thread over both halves: a row of 40 heads x 128 is 5120 elements
    warps = max(1, min(8, block_h * head_dim // 1024))
    _rope_append_kernel[(rows,)](
        qkv, cos, sin, slots, k_pool, v_pool, qkv.stride(0), tokens, start,
        HEADS=heads, KV_HEADS=kv_heads, HALF=head_dim // 2, BLOCK_H=block_h, APPEND=append is not None,
        num_warps=warps,
    )  # fmt: skip
    return qkv
