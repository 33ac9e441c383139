"""attention (prefill): O = softmax(Q K^T / sqrt(D) [+ causal mask]) V over [B, H, N, D].

The compute-bound family: 4*B*H*N^2*D tensor-core FLOPs against only 4*B*H*N*D elements of
traffic, so a fused kernel sits far right of the ridge point. The unfused chain instead writes and
re-reads the N x N scores several times and needs O(N^2) extra memory; the fused kernels (SDPA,
Triton, CUDA) keep the scores on chip with the online softmax and allocate nothing beyond O.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from rooflint.core.errors import UserError, VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC, NEEDS_TRITON, Cost, Family, element_size, randn
from rooflint.core.triton_compat import interpreting, tl, triton
from rooflint.engine import cuda_build
from rooflint.kernels import _sdpa, cuda_dtype

HEAD_DIMS = (64, 128, 256)
CUDA_HEAD_DIMS = (64, 128)  # attention.cu's instantiations
# float64 scores the reference holds at once: 2^28 of them are 2 GiB, small beside an 80 GB GPU.
REFERENCE_CHUNK_SCORES = 1 << 28


def make_inputs(params, dtype, device, generator):
    if params["D"] not in HEAD_DIMS:
        raise UserError(f"attention head_dim D must be one of {HEAD_DIMS}, not {params['D']}")
    shape = [params["B"], params["H"], params["N"], params["D"]]
    return {name: randn(shape, dtype, device, generator) for name in ("q", "k", "v")}


def _causal_mask(n, device):
    # True above the diagonal: key j > query i is hidden (top-left aligned, as SDPA's is_causal).
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1)


def reference(inputs, params):
    """float64 attention, chunked over (batch x head) so the float64 scores stay near 2 GiB."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    b, h, n, d = q.shape
    q, k, v = (t.reshape(b * h, n, d) for t in (q, k, v))
    out = torch.empty(b * h, n, d, dtype=torch.float64, device=q.device)
    mask = _causal_mask(n, q.device) if params["causal"] else None
    chunk = max(1, REFERENCE_CHUNK_SCORES // (n * n))
    for start in range(0, b * h, chunk):
        rows = slice(start, start + chunk)
        scores = q[rows].double() @ k[rows].double().transpose(1, 2) / math.sqrt(d)
        if mask is not None:
            scores.masked_fill_(mask, float("-inf"))
        out[rows] = torch.softmax(scores, dim=-1) @ v[rows].double()
    return out.reshape(b, h, n, d)


def _pairs(params):
    """Query-key pairs computed per (batch, head): N^2, halved for causal (FlashAttention convention)."""
    n = params["N"]
    return n * n / 2 if params["causal"] else n * n


def cost(params, dtype):
    b, h, n, d = params["B"], params["H"], params["N"], params["D"]
    size = element_size(dtype)
    return Cost(
        # Q K^T (2*D FLOPs a pair) and P V (2*D a pair), all on the tensor cores. The softmax's
        # ~5 FLOPs a pair (scale, max, subtract, exp on the MUFU, sum) are left out, as in the
        # FlashAttention papers, so TFLOP/s compares with published numbers; at D=128 they are
        # under 1% of the FLOPs (though the exps' MUFU time is not negligible on H100).
        tensor_flops=4 * b * h * d * _pairs(params),
        bytes=3 * b * h * n * d * size  # read q, k and v once
        + b * h * n * d * size,  # write o
    )


def unfused_bytes(params, dtype):
    """HBM traffic of the separate-op chain: every op writes the N x N scores and the next reads them."""
    b, h, n = params["B"], params["H"], params["N"]
    size = element_size(dtype)
    scores = b * h * n * n * size
    passes = (
        1  # Q K^T writes S
        + 2  # S * scale reads S, writes S'
        + (2 if params["causal"] else 0)  # masked_fill reads S', writes S'' (the bool mask is N^2 bytes, cached)
        + 2  # softmax reads, writes P
        + 1  # P V reads P
    )
    return passes * scores + cost(params, dtype).bytes


FAMILY = Family(
    "attention",
    summary="O = softmax(Q K^T / sqrt(D), causal or not) V, prefill",
    sizes={
        "small": [
            {"B": 1, "H": 2, "N": 130, "D": 64, "causal": False},
            {"B": 1, "H": 2, "N": 130, "D": 64, "causal": True},
        ],
        # q, k, v, o are 128 MiB each in bf16: 512 MiB, 10x the H100's 50 MB L2. Compute-bound anyway.
        # Then the other head dims (the same FLOPs at D=64 with 64 heads; 16 heads at D=256) and a
        # long causal sequence (N=16384), issue 14's "head dims 64 and 256 and N=16384".
        "large": [
            {"B": 4, "H": 32, "N": 4096, "D": 128, "causal": False},
            {"B": 4, "H": 32, "N": 4096, "D": 128, "causal": True},
            {"B": 4, "H": 64, "N": 4096, "D": 64, "causal": False},
            {"B": 4, "H": 64, "N": 4096, "D": 64, "causal": True},
            {"B": 4, "H": 16, "N": 4096, "D": 256, "causal": False},
            {"B": 4, "H": 16, "N": 4096, "D": 256, "causal": True},
            {"B": 1, "H": 32, "N": 16384, "D": 128, "causal": True},
        ],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
    dtypes=("fp16", "bf16"),
)


def unfused_attention(q, k, v, scale, mask):
    scores = torch.matmul(q, k.transpose(-2, -1))
    scores = scores * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, v)


def scores_shortfall(q_shape, element_size: int, free_bytes: int) -> str | None:
    """Why the unfused chain cannot run in ``free_bytes``, or None. It holds about three N x N score
    tensors at once (S, the scaled or masked copy, P): N=16384 with 32 heads is 17 GiB each in bf16."""
    b, h, n, _ = q_shape
    need = 3 * b * h * n * n * element_size
    if need > free_bytes:
        return f"the N x N scores need {need / 2**30:.0f} GiB; {free_bytes / 2**30:.0f} GiB are free"
    return None


def _needs_scores_memory(q, score_bytes: int | None = None) -> None:
    """Skip, with the sizes, rather than fail with an out-of-memory error mid-run. ``score_bytes``:
    the scores' element size where it is not q's (SDPA's math backend keeps them in fp32)."""
    if q.device.type == "cuda":
        why = scores_shortfall(q.shape, score_bytes or q.element_size(), torch.cuda.mem_get_info(q.device)[0])
        if why:
            raise VariantSkipped(why)


@FAMILY.variant("eager_unfused", modeled_bytes=unfused_bytes)
def eager_unfused(case):
    """matmul, scale, mask, softmax, matmul: materializes the N x N scores (O(N^2) memory)"""
    q, k, v = case["q"], case["k"], case["v"]
    _needs_scores_memory(q)
    mask = _causal_mask(q.shape[2], q.device) if case.params["causal"] else None
    scale = 1 / math.sqrt(q.shape[-1])
    return lambda: unfused_attention(q, k, v, scale, mask)


# torch.compile of each natural way to write attention, each its own row: the strongest one is the
# compiler's real result, and the one a hand-written kernel has to beat.
@FAMILY.variant("compile_unfused", kind="compile")
def compiled_unfused(case):
    """torch.compile of the unfused chain (inductor may pattern-match it to SDPA)"""
    q, k, v = case["q"], case["k"], case["v"]
    _needs_scores_memory(q)
    mask = _causal_mask(q.shape[2], q.device) if case.params["causal"] else None
    scale = 1 / math.sqrt(q.shape[-1])
    fn = torch.compile(unfused_attention, dynamic=False)
    return lambda: fn(q, k, v, scale, mask)


def sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


@FAMILY.variant("compile_builtin", kind="compile")
def compiled_builtin(case):
    """torch.compile of F.scaled_dot_product_attention"""
    q, k, v, causal = case["q"], case["k"], case["v"], case.params["causal"]
    fn = torch.compile(sdpa, dynamic=False)
    return lambda: fn(q, k, v, causal)


def sdpa_backend_name(q, k, v, causal) -> str:
    """The SDPA backend PyTorch's dispatcher picks for these inputs (flash_attention, cudnn_attention, ...)."""
    from torch.nn.attention import SDPBackend

    try:
        return SDPBackend(torch._fused_sdp_choice(q, k, v, None, 0.0, bool(causal))).name.lower()
    except Exception as error:  # a private API: report rather than fail the variant
        return f"unknown ({type(error).__name__})"


@FAMILY.variant("eager", baseline=True)
def eager(case):
    """F.scaled_dot_product_attention, PyTorch's default backend choice"""
    q, k, v, causal = case["q"], case["k"], case["v"], case.params["causal"]

    def run():
        return sdpa(q, k, v, causal)

    run.backend = sdpa_backend_name(q, k, v, causal)
    run.note = f"SDPA backend: {run.backend}"  # bench shows a variant's note in its row's message
    return run


def _sdpa_call(case):
    q, k, v, causal = case["q"], case["k"], case["v"], case.params["causal"]
    return lambda: sdpa(q, k, v, causal)


def _sdpa_math_call(case):
    # The math backend materialises the N x N scores in fp32 whatever q's dtype: at N=16384 with 32
    # heads that is 32 GiB a copy, more than an 80 GB H100 holds three times over (it ran out of
    # memory in the H100 reference at e434533), while an H200 runs it.
    _needs_scores_memory(case["q"], score_bytes=4)
    return _sdpa_call(case)


# SDPA's backends pinned one by one: the peers the Triton and CUDA targets are stated against. The
# math backend materialises the N x N scores (in fp32), as eager_unfused does, but as one built-in op.
for _name, _backend in _sdpa.BACKENDS.items():
    _needs = () if _backend == "MATH" else (NEEDS_CUDA,)
    _call = _sdpa_math_call if _backend == "MATH" else _sdpa_call
    FAMILY.variant(_name, kind="eager", needs=_needs)(_sdpa.pinned(_backend, _call))


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
    q_ptr, k_ptr, v_ptr, o_ptr, n, qk_scale, heads,
    q_b, q_h, q_t, k_b, k_h, k_t, v_b, v_h, v_t, o_b, o_h, o_t,
    D: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
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
    k_base = _head_base(k_ptr, batch, head, k_b, k_h)
    v_base = _head_base(v_ptr, batch, head, v_b, v_h)
    acc, m_i, l_i = _attn_tile_loop(
        acc, m_i, l_i, q, k_base, v_base, k_t, v_t, offs_m, 0, mid, n, qk_scale, D, BLOCK_N, False, CAUSAL, UPCAST
    )
    acc, m_i, l_i = _attn_tile_loop(
        acc, m_i, l_i, q, k_base, v_base, k_t, v_t, offs_m, mid, hi, n, qk_scale, D, BLOCK_N, True, CAUSAL, UPCAST
    )
    out = acc / l_i[:, None]
    o_rows = offs_m[:, None] * o_t + offs_d[None, :]
    o_base = _head_base(o_ptr, batch, head, o_b, o_h)
    tl.store(o_base + o_rows, out.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < n)


def _rows_of_d(t: torch.Tensor) -> torch.Tensor:
    """t when each of its [B, H, N] rows is D contiguous elements (strided views allowed), else a copy."""
    return t if t.stride(3) == 1 else t.contiguous()


def triton_attention(q, k, v, causal, out=None):
    """Attention over [B, H, N, D] q, k, v; each may be a strided view (unit stride over D only),
    as may ``out`` (a [B, N, H, D] buffer transposed, say): nothing is copied to make them dense."""
    b, h, n, d = q.shape
    q, k, v = (_rows_of_d(t) for t in (q, k, v))
    out = torch.empty_like(q, memory_format=torch.contiguous_format) if out is None else out
    assert out.stride(3) == 1, "attention writes rows of D contiguous elements"
    qk_scale = (1 / math.sqrt(d)) * 1.4426950408889634  # fold log2(e) in: exp2 is the native MUFU op
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_M"]), b * h)
    # Triton's CPU interpreter multiplies bf16 tl.dot operands as raw 16-bit patterns; fp32 operands
    # holding the same fp16/bf16 values give the tensor cores' exact products there instead.
    upcast = interpreting()
    strides = [s for t in (q, k, v, out) for s in t.stride()[:3]]
    _attn_fwd_kernel[grid](q, k, v, out, n, qk_scale, h, *strides, D=d, CAUSAL=bool(causal), UPCAST=upcast)
    return out


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case):
    """FlashAttention-2 style: online softmax in fp32, causal tiles skipped, autotuned tiles"""
    q, k, v, causal = case["q"], case["k"], case["v"], case.params["causal"]
    out = torch.empty_like(q)

    def run():
        result = triton_attention(q, k, v, causal, out)
        run.note = f"autotuned: {_attn_fwd_kernel.best_config}"  # the config of this call's key
        return result

    return run


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC))
def cuda_variant(case):
    """mma.sync m16n8k16 tiles (128 queries x 64 keys), cp.async double buffer, online softmax"""
    if torch.cuda.get_device_capability() < (8, 0):
        raise VariantSkipped("the CUDA attention needs sm_80 or newer (bf16 mma.sync, cp.async)")
    if case.params["D"] not in CUDA_HEAD_DIMS:
        raise VariantSkipped(f"the CUDA attention is built for head_dim {' or '.join(map(str, CUDA_HEAD_DIMS))}")
    library = cuda_build.load(cuda_build.family_source(__file__))
    q, k, v, causal = case["q"], case["k"], case["v"], case.params["causal"]
    out = torch.empty_like(q)
    return lambda: cuda_attention(library, q, k, v, causal, out)


def cuda_attention(library, q, k, v, causal: bool, out):
    """The CUDA kernel over dense [B, H, N, D] q, k, v and out (it takes no strides)."""
    b, h, n, d = q.shape
    library.launch("rooflint_attention", q, k, v, out, b * h, n, d, int(causal), cuda_dtype(q.dtype), 1 / math.sqrt(d))
    return out


# The Hopper CUDA path beside `cuda` (mma.sync, which stays the sm_80 path): attention_hopper.cu,
# FlashAttention-3 style (TMA producer warpgroup, two wgmma consumers in ping-pong, issue 14).
HOPPER_CUDA_HEAD_DIMS = (64, 128)


@FAMILY.variant("cuda_hopper", kind="cuda", needs=(NEEDS_CUDA, NEEDS_NVCC))
def cuda_hopper_variant(case):
    """sm_90 only: wgmma + TMA, a producer warpgroup and two consumer warpgroups in ping-pong"""
    if torch.cuda.get_device_capability(case.device) != (9, 0):
        raise VariantSkipped("the wgmma/TMA attention needs an sm_90 GPU (Hopper); `cuda` is the sm_80 path")
    if case.params["D"] not in HOPPER_CUDA_HEAD_DIMS:
        raise VariantSkipped(
            f"the wgmma attention is built for head_dim {' or '.join(map(str, HOPPER_CUDA_HEAD_DIMS))}"
            " (at D=256 two consumers' fp32 outputs and scores do not fit the register file)"
        )
    q, k, v, causal = case["q"], case["k"], case["v"], case.params["causal"]
    # Checked once here, not in the timed call: the launcher's tensor maps assume dense [B*H, N, D].
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_contiguous():
            raise VariantSkipped(f"the wgmma attention takes contiguous tensors; {name} is strided")
    library = cuda_build.load(cuda_build.family_source(__file__, "attention_hopper"))
    out = torch.empty_like(q)
    return lambda: cuda_hopper_attention(library, q, k, v, causal, out)


def cuda_hopper_attention(library, q, k, v, causal: bool, out):
    """The wgmma kernel over dense (contiguous) [B, H, N, D] q, k, v and out: its TMA maps take no other layout."""
    b, h, n, d = q.shape
    library.launch(
        "rooflint_attention_hopper", q, k, v, out, b * h, n, d, int(causal), cuda_dtype(q.dtype), 1 / math.sqrt(d)
    )
    return out


# The Hopper (sm_90) path, beside the `triton` variant above that stays the sm_75/sm_80 path: TMA
# descriptors, 128-row wgmma tiles, a pipelined K/V loop that can be warp-specialized, and the
# causal mask only on the diagonal blocks (kernels/_attention_hopper.py, issue 14).
@FAMILY.variant("triton_hopper", kind="triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_hopper_variant(case):
    """sm_90 only: TMA-fed FlashAttention forward, pipelined (optionally warp-specialized), diagonal-only mask"""
    from rooflint.kernels import _attention_hopper

    return _attention_hopper.build_variant(case)


# Gluon (Triton's lower-level language), sm_90: a TMA producer warp, two unsynchronized consumer
# warpgroups, the next tile's Q K^T under this tile's softmax (kernels/_attention_gluon.py, issue 14).
@FAMILY.variant("triton_gluon", kind="triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_gluon_variant(case):
    """sm_90 only: Gluon FlashAttention-3 schedule (producer warp, two consumer warpgroups, S ahead of P V)"""
    from rooflint.kernels import _attention_gluon

    return _attention_gluon.build_variant(case)
