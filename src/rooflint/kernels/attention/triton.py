"""attention: triton implementation."""

from __future__ import annotations

import math

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import interpreting, tl, triton
from rooflint.kernels.attention import FAMILY, fp8
from rooflint.kernels.common import autotune_picks
from rooflint.kernels.scaled_gemm.formats import require_fp8_tensor_cores


def _autotune_configs():
    if interpreting():
        # The CPU interpreter runs every config it is given: one small tile keeps tests fast.
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=4, num_stages=1)]
    # For H100: 128-row query tiles (two warpgroups' wgmma M, or one at 4 warps), 64- or 128-key
    # tiles, 2-3 cp.async/TMA stages of K and V (each 128x128 bf16 stage is 64 KB of the 228 KB smem).
    # D=256 doubles every tile: the last two keep Q plus two stages of K and V at 96-128 KB and the
    # fp32 accumulator at 128 registers a thread. Configs that do not fit a GPU's shared memory
    # fail to compile and the autotuner drops them (OutOfResources).
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s in (
            (128, 64, 4, 3), (128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3),
            (64, 32, 4, 2), (128, 32, 8, 2),
        )
    ]  # fmt: skip


@triton.jit
def _attn_tile_loop(
    acc, m_i, l_i, q, k_base, v_base, k_row, v_row, offs_m, lo, hi, n, qk_scale,
    D: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
    PV_BF16: tl.constexpr,
):  # fmt: skip
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k_tile = cols[:, None] * k_row + offs_d[None, :]
        if MASKED:  # only the diagonal and tail tiles pay for bounds and causal masks
            k = tl.load(k_base + k_tile, mask=cols[:, None] < n, other=0.0)
        else:
            k = tl.load(k_base + k_tile)
        if UPCAST:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k))  # fp32 accumulate on the tensor cores
        if MASKED:
            keep = cols[None, :] < n
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None])
            s = tl.where(keep, s, float("-inf"))
        # Online softmax in base 2, fp32: rescale the running sum and output when the max grows.
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v_tile = cols[:, None] * v_row + offs_d[None, :]
        if MASKED:
            v = tl.load(v_base + v_tile, mask=cols[:, None] < n, other=0.0)
        else:
            v = tl.load(v_base + v_tile)
        if PV_BF16:
            # fp8 inputs: P V in bf16. V's e4m3 codes widen to bf16 exactly; P rounded to e4m3 would
            # lose up to 6% of each probability, more than the output's gate allows.
            v = v.to(tl.bfloat16)
            p = p.to(tl.bfloat16)
        else:
            p = p.to(v_base.dtype.element_ty)  # P rounded to the input dtype, as the tensor cores take it
        if UPCAST:
            p, v = p.to(tl.float32), v.to(tl.float32)
        acc = tl.dot(p, v, acc)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _head_base(ptr, batch, head, stride_b, stride_h):
    # int64: B*H*N*D elements pass 2^31 at long sequences.
    return ptr + batch.to(tl.int64) * stride_b + head.to(tl.int64) * stride_h


@triton.autotune(configs=_autotune_configs(), key=["n", "D", "CAUSAL"])
@triton.jit
def _attn_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, n, qk_scale, v_scale, heads, group,
    q_b, q_h, q_t, k_b, k_h, k_t, v_b, v_h, v_t, o_b, o_h, o_t,
    D: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr, PV_BF16: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):  # fmt: skip
    # fp8 q, k and v (PV_BF16): Q K^T runs on the codes (fp8 MMAs), their scales folded into
    # qk_scale; P V runs in bf16 and V's scale multiplies each output once.
    # Each tensor is [B, H, N, D] with any (batch, head, token) strides and unit stride over D: a
    # model's fused QKV output is read as strided views, and O written straight into [B, N, H, D].
    num_m = tl.cdiv(n, BLOCK_M)
    # Causal rows near the end have the most tiles: schedule them first so short ones fill the tail.
    start_m = num_m - 1 - tl.program_id(0) if CAUSAL else tl.program_id(0)
    batch, head = tl.program_id(1) // heads, tl.program_id(1) % heads
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    q_rows = offs_m[:, None] * q_t + offs_d[None, :]
    q = tl.load(_head_base(q_ptr, batch, head, q_b, q_h) + q_rows, mask=offs_m[:, None] < n, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    if CAUSAL:
        # Tiles wholly below the diagonal need no mask, the BLOCK_M / BLOCK_N diagonal tiles do,
        # and tiles above the diagonal are never visited.
        mid = start_m * BLOCK_M
        hi = tl.minimum(mid + BLOCK_M, n)
    else:
        mid = (n // BLOCK_N) * BLOCK_N  # whole tiles unmasked, then the ragged tail masked
        hi = n
    # grouped-query attention: ``group`` query heads share one K and V head
    k_base = _head_base(k_ptr, batch, head // group, k_b, k_h)
    v_base = _head_base(v_ptr, batch, head // group, v_b, v_h)
    acc, m_i, l_i = _attn_tile_loop(
        acc, m_i, l_i, q, k_base, v_base, k_t, v_t, offs_m, 0, mid, n, qk_scale, D, BLOCK_N, False, CAUSAL, UPCAST,
        PV_BF16,
    )  # fmt: skip
    acc, m_i, l_i = _attn_tile_loop(
        acc, m_i, l_i, q, k_base, v_base, k_t, v_t, offs_m, mid, hi, n, qk_scale, D, BLOCK_N, True, CAUSAL, UPCAST,
        PV_BF16,
    )  # fmt: skip
    if PV_BF16:
        out = acc * (v_scale / l_i)[:, None]
    else:
        out = acc / l_i[:, None]
    o_rows = offs_m[:, None] * o_t + offs_d[None, :]
    o_base = _head_base(o_ptr, batch, head, o_b, o_h)
    tl.store(o_base + o_rows, out.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < n)


def _rows_of_d(t: torch.Tensor) -> torch.Tensor:
    """t when each of its [B, H, N] rows is D contiguous elements (strided views allowed), else a copy."""
    return t if t.stride(3) == 1 else t.contiguous()


def triton_attention(q, k, v, causal, out=None, group=1, scales=None):
    """Attention over [B, H, N, D] q, k, v; each may be a strided view (unit stride over D only),
    as may ``out`` (a [B, N, H, D] buffer transposed, say): nothing is copied to make them dense.
    ``group`` > 1: k and v have H / group heads, query head i reading kv head i // group (GQA).
    fp8 codes take ``scales`` = (sq, sk, sv) as floats, and ``out`` is bf16."""
    b, h, n, d = q.shape
    q, k, v = (_rows_of_d(t) for t in (q, k, v))
    pv_bf16 = scales is not None
    if out is None:
        out = torch.empty(q.shape, dtype=fp8.out_dtype(q.dtype), device=q.device)
    assert out.stride(3) == 1, "attention writes rows of D contiguous elements"
    sq, sk, sv = scales if pv_bf16 else (1.0, 1.0, 1.0)
    qk_scale = (sq * sk / math.sqrt(d)) * 1.4426950408889634  # fold log2(e) in: exp2 is the native MUFU op
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_M"]), b * h)
    # Triton's CPU interpreter multiplies bf16 tl.dot operands as raw 16-bit patterns; fp32 operands
    # holding the same fp16/bf16 values give the tensor cores' exact products there instead.
    upcast = interpreting()
    strides = [s for t in (q, k, v, out) for s in t.stride()[:3]]
    autotune_picks.launch(
        _attn_fwd_kernel, grid, q.device, q, k, v, out, n, qk_scale, sv, h, group, *strides,
        D=d, CAUSAL=bool(causal), UPCAST=upcast, PV_BF16=pv_bf16,
    )  # fmt: skip
    return out


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case):
    """FlashAttention-2 style: online softmax in fp32, causal tiles skipped, autotuned tiles; fp8: Q K^T on the codes"""
    q, k, v, causal = case["q"], case["k"], case["v"], case.params["causal"]
    scales = None
    if fp8.is_fp8(q.dtype):
        require_fp8_tensor_cores(q.device)
        scales = tuple(float(case[name]) for name in fp8.SCALES)  # read once here, not in the timed call
    out = torch.empty(q.shape, dtype=fp8.out_dtype(q.dtype), device=q.device)

    def run():
        result = triton_attention(q, k, v, causal, out, scales=scales)
        run.note = f"autotuned: {_attn_fwd_kernel.best_config}"  # the config of this call's key
        return result

    return run
