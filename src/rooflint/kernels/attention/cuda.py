"""attention: cuda implementation."""

from __future__ import annotations

import math
from types import MappingProxyType

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype
from rooflint.kernels.attention import CUDA_HEAD_DIMS, FAMILY
from rooflint.kernels.attention.fp8 import HALF_DTYPES

ATTENTION_CU = cuda_build.family_source(__file__, "attention")
ATTENTION_HOPPER_CU = cuda_build.family_source(__file__, "attention_hopper")


@FAMILY.variant(
    "cuda",
    needs=(NEEDS_CUDA, NEEDS_NVCC),
    dtypes=HALF_DTYPES,
    sources=(ATTENTION_CU,),
)
def cuda_variant(case):
    """mma.sync m16n8k16 tiles (128 queries x 64 keys), cp.async double buffer, online softmax"""
    if torch.cuda.get_device_capability() < (8, 0):
        raise VariantSkipped("the CUDA attention needs sm_80 or newer (bf16 mma.sync, cp.async)")
    if case.params["D"] not in CUDA_HEAD_DIMS:
        raise VariantSkipped(f"the CUDA attention is built for head_dim {' or '.join(map(str, CUDA_HEAD_DIMS))}")
    library = cuda_build.load(ATTENTION_CU)
    q, k, v, causal = case["q"], case["k"], case["v"], case.params["causal"]
    out = torch.empty_like(q)
    return lambda: cuda_attention(library, q, k, v, causal, out)


def cuda_attention(library, q, k, v, causal: bool, out):
    """The CUDA kernel over dense [B, H, N, D] q, k, v and out (it takes no strides)."""
    b, h, n, d = q.shape
    library.launch("rooflint_attention", q, k, v, out, b * h, n, d, int(causal), cuda_dtype(q.dtype), 1 / math.sqrt(d))
    return out


# The Hopper CUDA path beside `cuda` (mma.sync, which stays the sm_80 path): attention_hopper.cu,
# FlashAttention-3 style (TMA producer warpgroup, wgmma consumers in ping-pong: two at D=128 and 256,
# three at D=64).
# Its compile-time meta-parameters (`rooflint ab attention -V cuda_hopper --config CONSUMERS_D64=2,3`):
# None keeps the source's own default. Each maps to a -D of attention_hopper.cu.
HOPPER_CUDA_DEFINES = {
    "CONSUMERS_D64": "ROOFLINT_FA3_CONSUMERS_D64",
    "STAGES_D64": "ROOFLINT_FA3_STAGES_D64",
    "STAGES_D128": "ROOFLINT_FA3_STAGES_D128",
    "UNIFORM_WG": "ROOFLINT_FA3_UNIFORM_WARPGROUP",
    "PERSISTENT": "ROOFLINT_FA3_PERSISTENT",
    "PINGPONG": "ROOFLINT_FA3_PINGPONG",
    "V_LAG": "ROOFLINT_FA3_V_LAG",
    "MAX_CHAINS": "ROOFLINT_FA3_MAX_CHAINS",
    "MAX_CHAINS_D64": "ROOFLINT_FA3_MAX_CHAINS_D64",
    "V_WAIT_LATE": "ROOFLINT_FA3_V_WAIT_LATE",
    "SOFTMAX_FENCE": "ROOFLINT_FA3_SOFTMAX_FENCE",
    "D256": "ROOFLINT_FA3_D256",
    "STAGES_D256": "ROOFLINT_FA3_STAGES_D256",
}
HOPPER_CUDA_CONFIG = MappingProxyType(dict.fromkeys(HOPPER_CUDA_DEFINES))
# The values the source's static_asserts take, refused before nvcc runs (its error would only say
# that the build failed): meta-parameter -> (valid values, why no other).
HOPPER_CUDA_VALUES = {
    "CONSUMERS_D64": ((2, 3), "the register file holds no more"),
    "MAX_CHAINS": ((1, 2, 4, 8), "the chains are folded in halves"),
    "MAX_CHAINS_D64": ((1, 2, 4, 8), "the chains are folded in halves"),
}


@FAMILY.variant(
    "cuda_hopper",
    kind="cuda",
    needs=(NEEDS_CUDA, NEEDS_NVCC),
    dtypes=HALF_DTYPES,
    sources=(ATTENTION_HOPPER_CU,),
)
def cuda_hopper_variant(case, config=HOPPER_CUDA_CONFIG):
    """sm_90 only: wgmma + TMA, a producer warpgroup and two (D=128, 256) or three (D=64) consumers in ping-pong"""
    if torch.cuda.get_device_capability(case.device) != (9, 0):
        raise VariantSkipped("the wgmma/TMA attention needs an sm_90 GPU (Hopper); `cuda` is the sm_80 path")
    head_dim = case.params["D"]
    if head_dim == 256 and config.get("D256") == 0:
        raise VariantSkipped("this build of the wgmma attention (D256=0) is for head_dim 64, 128")
    q, k, v, causal = case["q"], case["k"], case["v"], case.params["causal"]
    # Checked once here, not in the timed call: the launcher's tensor maps assume dense [B*H, N, D].
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_contiguous():
            raise VariantSkipped(f"the wgmma attention takes contiguous tensors; {name} is strided")
    for key, (valid, why) in HOPPER_CUDA_VALUES.items():
        if config.get(key) not in (None, *valid):
            listed = ", ".join(map(str, valid[:-1])) + f" or {valid[-1]}"
            raise VariantSkipped(f"{key} is {listed} ({why}), not {config[key]}")
    defines = tuple((HOPPER_CUDA_DEFINES[name], value) for name, value in config.items() if value is not None)
    library = cuda_build.load(ATTENTION_HOPPER_CU, None, defines)
    out = torch.empty_like(q)
    schedule = new_schedule(q.device)
    return lambda: cuda_hopper_attention(library, q, k, v, causal, out, schedule)


def new_schedule(device) -> torch.Tensor:
    """The two counters through which a causal launch's persistent CTAs claim their tiles: zero
    here, and each launch leaves them at zero. One launch at a time may use a given pair."""
    return torch.zeros(2, dtype=torch.int32, device=device)


def cuda_hopper_attention(library, q, k, v, causal: bool, out, schedule):
    """The wgmma kernel over dense (contiguous) [B, H, N, D] q, k, v and out: its TMA maps take no other layout."""
    b, h, n, d = q.shape
    library.launch(
        "rooflint_attention_hopper",
        q,
        k,
        v,
        out,
        schedule,
        b * h,
        n,
        d,
        int(causal),
        cuda_dtype(q.dtype),
        1 / math.sqrt(d),
    )
    return out
