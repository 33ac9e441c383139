"""attention: cuda implementation."""

from __future__ import annotations

import math

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype
from rooflint.kernels.attention import CUDA_HEAD_DIMS, FAMILY


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC))
def cuda_variant(case):
    """mma.sync m16n8k16 tiles (128 queries x 64 keys), cp.async double buffer, online softmax"""
    if torch.cuda.get_device_capability() < (8, 0):
        raise VariantSkipped("the CUDA attention needs sm_80 or newer (bf16 mma.sync, cp.async)")
    if case.params["D"] not in CUDA_HEAD_DIMS:
        raise VariantSkipped(f"the CUDA attention is built for head_dim {' or '.join(map(str, CUDA_HEAD_DIMS))}")
    library = cuda_build.load(cuda_build.family_source(__file__, "attention"))
    q, k, v, causal = case["q"], case["k"], case["v"], case.params["causal"]
    out = torch.empty_like(q)
    return lambda: cuda_attention(library, q, k, v, causal, out)


def cuda_attention(library, q, k, v, causal: bool, out):
    """The CUDA kernel over dense [B, H, N, D] q, k, v and out (it takes no strides)."""
    b, h, n, d = q.shape
    library.launch("rooflint_attention", q, k, v, out, b * h, n, d, int(causal), cuda_dtype(q.dtype), 1 / math.sqrt(d))
    return out


# The Hopper CUDA path beside `cuda` (mma.sync, which stays the sm_80 path): attention_hopper.cu,
# FlashAttention-3 style (TMA producer warpgroup, two wgmma consumers in ping-pong).
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
