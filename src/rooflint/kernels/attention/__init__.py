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
from rooflint.core.family import NEEDS_CUDA, Cost, Family, element_size, randn
from rooflint.kernels.attention import fp8
from rooflint.kernels.attention.fp8 import HALF_DTYPES
from rooflint.kernels.common.sdpa import BACKENDS, pinned

HEAD_DIMS = (64, 128, 256)


CUDA_HEAD_DIMS = (64, 128)  # attention.cu's instantiations


# float64 scores the reference holds at once: 2^28 of them are 2 GiB, small beside an 80 GB GPU.
REFERENCE_CHUNK_SCORES = 1 << 28


def check(params):
    """The head dims the family's kernels take (its cost model takes any: a model's attention asks it)."""
    if params["D"] not in HEAD_DIMS:
        raise UserError(f"attention head_dim D must be one of {HEAD_DIMS}, not {params['D']}")


def make_inputs(params, dtype, device, generator):
    shape = [params["B"], params["H"], params["N"], params["D"]]
    if fp8.is_fp8(dtype):
        return fp8.make_inputs(shape, dtype, device, generator)
    return {name: randn(shape, dtype, device, generator) for name in ("q", "k", "v")}


def _causal_mask(n, device):
    # True above the diagonal: key j > query i is hidden (top-left aligned, as SDPA's is_causal).
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1)


def reference(inputs, params):
    """float64 attention, chunked over (batch x head) so the float64 scores stay near 2 GiB; fp8
    inputs are dequantized (code * scale) in float64."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    sq, sk, sv = (float(inputs[name]) if name in inputs else 1.0 for name in fp8.SCALES)
    b, h, n, d = q.shape
    q, k, v = (t.reshape(b * h, n, d) for t in (q, k, v))
    out = torch.empty(b * h, n, d, dtype=torch.float64, device=q.device)
    mask = _causal_mask(n, q.device) if params["causal"] else None
    chunk = max(1, REFERENCE_CHUNK_SCORES // (n * n))
    for start in range(0, b * h, chunk):
        rows = slice(start, start + chunk)
        scores = (q[rows].double() * sq) @ (k[rows].double() * sk).transpose(1, 2) / math.sqrt(d)
        if mask is not None:
            scores.masked_fill_(mask, float("-inf"))
        out[rows] = torch.softmax(scores, dim=-1) @ (v[rows].double() * sv)
    return out.reshape(b, h, n, d)


def _pairs(params):
    """Query-key pairs computed per (batch, head): N^2, halved for causal (FlashAttention convention)."""
    n = params["N"]
    return n * n / 2 if params["causal"] else n * n


def cost(params, dtype):
    b, h, n, d = params["B"], params["H"], params["N"], params["D"]
    # Q K^T (2*D FLOPs a pair) and P V (2*D a pair), all on the tensor cores. The softmax's
    # ~5 FLOPs a pair (scale, max, subtract, exp on the MUFU, sum) are left out, as in the
    # FlashAttention papers, so TFLOP/s compares with published numbers; at D=128 they are
    # under 1% of the FLOPs (though the exps' MUFU time is not negligible on H100).
    tensor_flops = 4 * b * h * d * _pairs(params)
    if fp8.is_fp8(dtype):
        return fp8.cost(tensor_flops, params)
    size = element_size(dtype)
    return Cost(
        tensor_flops=tensor_flops,
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
        # long causal sequence (N=16384).
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
    check=check,
    # fp8_e4m3 (fp8.py): per-tensor scaled codes, O in bf16; only where a variant has an fp8 form.
    dtypes=(*HALF_DTYPES, *fp8.FP8_DTYPES),
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


@FAMILY.variant("eager_unfused", modeled_bytes=unfused_bytes, dtypes=HALF_DTYPES)
def eager_unfused(case):
    """matmul, scale, mask, softmax, matmul: materializes the N x N scores (O(N^2) memory)"""
    q, k, v = case["q"], case["k"], case["v"]
    _needs_scores_memory(q)
    mask = _causal_mask(q.shape[2], q.device) if case.params["causal"] else None
    scale = 1 / math.sqrt(q.shape[-1])
    return lambda: unfused_attention(q, k, v, scale, mask)


# torch.compile of each natural way to write attention, each its own row: the strongest one is the
# compiler's real result, and the one a hand-written kernel has to beat.
@FAMILY.variant("compile_unfused", kind="compile", dtypes=HALF_DTYPES)
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


@FAMILY.variant("compile_builtin", kind="compile", dtypes=HALF_DTYPES)
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


def eager_bytes(params, dtype):
    return cost(params, dtype).bytes + (fp8.dequantize_bytes(params) if fp8.is_fp8(dtype) else 0)


@FAMILY.variant("eager", baseline=True, modeled_bytes=eager_bytes)
def eager(case):
    """F.scaled_dot_product_attention, PyTorch's default backend choice; fp8: dequantized to bf16 first"""
    q, k, v, causal = case["q"], case["k"], case["v"], case.params["causal"]
    fp8_inputs = fp8.is_fp8(q.dtype)  # no fp8 SDPA in PyTorch: dequantize first, as a user without an fp8 kernel does

    def run():
        if fp8_inputs:
            return sdpa(*fp8.dequantized(case), causal)
        return sdpa(q, k, v, causal)

    run.backend = sdpa_backend_name(*(fp8.dequantized(case) if fp8_inputs else (q, k, v)), causal)
    # bench shows a variant's note in its row's message
    run.note = ("dequantized to bf16, then " if fp8_inputs else "") + f"SDPA backend: {run.backend}"
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
for _name, _backend in BACKENDS.items():
    _needs = () if _backend == "MATH" else (NEEDS_CUDA,)
    _call = _sdpa_math_call if _backend == "MATH" else _sdpa_call
    FAMILY.variant(_name, kind="eager", needs=_needs, dtypes=HALF_DTYPES)(pinned(_backend, _call))


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.attention import cuda, gluon, hopper, library, triton  # noqa: E402, F401
