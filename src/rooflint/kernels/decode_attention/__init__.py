"""decode_attention: one new query token per sequence against its KV cache (flash-decoding).

q is [B, H, 1, D]; k and v are [B, H_kv, C, D] with H_kv dividing H (grouped-query attention:
query heads h*G .. h*G+G-1 share kv head h, G = H / H_kv). Each cached K and V byte is used for
G multiply-adds per query head group, so the arithmetic intensity is about G FLOP/byte: decode
sits on the bandwidth slope, and the only goal is to stream K and V once at full HBM bandwidth.

With one query row there is no sequence dimension to parallelise over, so B * H_kv programs may
not fill the GPU. Flash-decoding splits the cache into chunks: each program reduces one chunk to
a partial (running max m, sum l, unnormalised accumulator), and a second tiny kernel combines the
partials of a row with the usual rescaling by exp(m_i - max m).
"""

from __future__ import annotations

import math

import torch

from rooflint.core.errors import UserError
from rooflint.core.family import NEEDS_CUDA, Cost, Family, element_size, randn
from rooflint.kernels.common.sdpa import BACKENDS, pinned

LOG2E = 1.4426950408889634


def check(params):
    """Grouped-query attention shares each kv head among h / h_kv query heads: a whole number of them."""
    if params["h"] % params["h_kv"]:
        raise UserError(f"decode_attention h_kv must divide h (query heads per kv head), not h={params['h']}, "
                        f"h_kv={params['h_kv']}")  # fmt: skip


def make_inputs(params, dtype, device, generator):
    b, h, h_kv, c, d = params["b"], params["h"], params["h_kv"], params["c"], params["d"]
    return {
        "q": randn([b, h, 1, d], dtype, device, generator),
        "k": randn([b, h_kv, c, d], dtype, device, generator),
        "v": randn([b, h_kv, c, d], dtype, device, generator),
    }


def reference(inputs, params):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    b, h, h_kv, d = params["b"], params["h"], params["h_kv"], params["d"]
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    # One sequence at a time: the whole large cache in float64 would be 17 GB.
    for i in range(b):
        qg = q[i].double().reshape(h_kv, h // h_kv, d)
        scores = qg @ k[i].double().transpose(-1, -2) / math.sqrt(d)
        out[i] = (torch.softmax(scores, dim=-1) @ v[i].double()).reshape(h, 1, d)
    return out


def cost(params, dtype):
    b, h, h_kv, c, d = params["b"], params["h"], params["h_kv"], params["c"], params["d"]
    size = element_size(dtype)
    # FlashAttention's convention: 2 FLOPs per multiply-add of QK^T and of PV; the softmax's few
    # CUDA-core ops per score are not counted, so TFLOP/s compare with other attention tools.
    return Cost(
        tensor_flops=4 * b * h * c * d,
        bytes=b * h * d * size  # read q
        + 2 * b * h_kv * c * d * size  # read K and V, once per kv head, not once per query head
        + b * h * d * size,  # write o
    )


def unfused_bytes(params, dtype):
    """Each of the B*H*C scores is written by QK^T, read and written by softmax, read by PV."""
    b, h, c = params["b"], params["h"], params["c"]
    return cost(params, dtype).bytes + 4 * b * h * c * element_size(dtype)


FAMILY = Family(
    "decode_attention",
    summary="o = softmax(q K^T / sqrt(d)) V for one query token, grouped-query KV cache",
    sizes={
        "small": [{"b": 2, "h": 4, "h_kv": 2, "c": 300, "d": 64}],
        # Multi-head (the peer SDPA measurement: 4.3 GB of cache) and Llama-style GQA with 4
        # query heads per kv head (1.1 GB): both far beyond the 50 MB L2.
        "large": [
            {"b": 32, "h": 32, "h_kv": 32, "c": 8192, "d": 128},
            {"b": 32, "h": 32, "h_kv": 8, "c": 8192, "d": 128},
        ],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
    check=check,
    dtypes=("fp16", "bf16"),
)


def sdpa_gqa(q, k, v):
    # enable_gqa lets the flash and cuDNN backends index kv head h // G directly; the math
    # backend materialises K and V repeated G times, so its cache traffic grows G-fold.
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])


def _sdpa_call(case):
    q, k, v = case["q"], case["k"], case["v"]
    return lambda: sdpa_gqa(q, k, v)


@FAMILY.variant("eager", baseline=True)
def eager(case):
    """F.scaled_dot_product_attention(enable_gqa=True)"""
    q, k, v = case["q"], case["k"], case["v"]
    run = _sdpa_call(case)
    run.note = f"SDPA backend: {sdpa_backend_name(q, k, v, q.shape[1] != k.shape[1])}"  # bench shows it in the row
    return run


# Each SDPA backend pinned on its own: the dispatcher's pick is not always the fastest for one query
# row, and a backend that does not take GQA or these shapes on this GPU reports skipped, with why.
for _name, _backend in BACKENDS.items():
    _needs = () if _backend == "MATH" else (NEEDS_CUDA,)
    FAMILY.variant(_name, kind="eager", needs=_needs)(pinned(_backend, _sdpa_call))


def sdpa_backend_name(q, k, v, gqa: bool) -> str:
    """The backend SDPA's dispatcher picks (cudnn_attention on the H100 for both large shapes)."""
    from torch.nn.attention import SDPBackend

    try:
        return SDPBackend(torch._fused_sdp_choice(q, k, v, None, 0.0, False, enable_gqa=gqa)).name.lower()
    except Exception as error:  # a private API: report rather than fail the variant
        return f"unknown ({type(error).__name__})"


def unfused(q, k, v):
    b, h, _, d = q.shape
    h_kv = k.shape[1]
    # Grouping the G query heads of a kv head as G rows makes GQA a plain batched matmul over
    # the cache as stored: no repeat of K or V.
    qg = (q * (1.0 / math.sqrt(d))).reshape(b, h_kv, h // h_kv, d)
    scores = torch.matmul(qg, k.transpose(-1, -2))
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, v).reshape(b, h, 1, d)


@FAMILY.variant("eager_unfused", modeled_bytes=unfused_bytes)
def eager_unfused(case):
    """matmul, softmax, matmul: the scores make two round trips through HBM"""
    q, k, v = case["q"], case["k"], case["v"]
    return lambda: unfused(q, k, v)


# torch.compile of each natural way to write decode attention, each its own row.
@FAMILY.variant("compile_unfused", kind="compile")
def compiled_unfused(case):
    """torch.compile(matmul, softmax, matmul)"""
    q, k, v = case["q"], case["k"], case["v"]
    fn = torch.compile(unfused, dynamic=False)
    return lambda: fn(q, k, v)


@FAMILY.variant("compile_builtin", kind="compile")
def compiled_builtin(case):
    """torch.compile of F.scaled_dot_product_attention(enable_gqa=True)"""
    q, k, v = case["q"], case["k"], case["v"]
    fn = torch.compile(sdpa_gqa, dynamic=False)
    return lambda: fn(q, k, v)


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.decode_attention import cuda, library, triton  # noqa: E402, F401
