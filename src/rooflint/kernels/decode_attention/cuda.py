"""decode_attention: cuda implementation."""

from __future__ import annotations

import math

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype, sm_count
from rooflint.kernels.decode_attention import FAMILY, LOG2E
from rooflint.kernels.decode_attention.plans import DecodeWorkspace, cache_layout, q_layout, wave_plan

DECODE_ATTENTION_CU = cuda_build.family_source(__file__, "decode_attention")

CUDA_GROUPS = (1, 2, 4, 8)  # query heads per kv head the CUDA kernel is instantiated for


# The CUDA split kernels (decode_attention.cu's DecodePath): "auto" runs the tensor-core kernel on
# sm_80+ and the CUDA-core kernel below; the other two force one of them (tests, A/B scripts).
CUDA_PATHS = {"auto": 0, "cuda_cores": 1, "tensor_cores": 2}


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC), sources=(DECODE_ATTENTION_CU,))
def cuda_variant(case):
    """CUDA C++ flash-decoding: mma.sync on sm_80+ (CUDA-core FMAs on sm_75), cp.async rings, combine kernel"""
    q, k, v = case["q"], case["k"], case["v"]
    b, h, _, d = q.shape
    h_kv, c = k.shape[1], k.shape[2]
    if h // h_kv not in CUDA_GROUPS or d not in (64, 128):
        raise VariantSkipped(f"CUDA decode is built for G in {CUDA_GROUPS} and head_dim 64 or 128")
    library = cuda_build.load(DECODE_ATTENTION_CU)
    ws = DecodeWorkspace(q, h_kv, c, plan=cuda_plan(library, q, h_kv, c))
    return lambda: cuda_decode(library, q, k, v, ws)


def cuda_blocks_per_sm(library, q: torch.Tensor, h_kv: int, path: str = "auto") -> int:
    """Split-kernel blocks one SM holds at once for q's head dim, group and dtype on this path."""
    _, h, _, d = q.shape
    return library.query("rooflint_decode_blocks_per_sm", d, h // h_kv, cuda_dtype(q.dtype), CUDA_PATHS[path])


def cuda_plan(library, q: torch.Tensor, h_kv: int, c: int, path: str = "auto") -> tuple[int, int]:
    """The CUDA kernel's splits: the best-filled waves of the blocks this GPU holds per SM for this shape."""
    per_sm = cuda_blocks_per_sm(library, q, h_kv, path)
    return wave_plan(q.shape[0], h_kv, c, max(1, per_sm) * sm_count(q.device, on_cpu=132))


def cuda_decode(library, q, k, v, ws: DecodeWorkspace, path: str = "auto"):
    """The CUDA kernel over a dense cache or a length-prefix view of a preallocated one (read in place)."""
    b, h, _, d = q.shape
    h_kv, c = k.shape[1], k.shape[2]
    q, q_stride = q_layout(q)
    k, v, rows = cache_layout(k, v)
    library.launch(
        "rooflint_decode_attention", q, k, v, ws.part_acc, ws.part_ml, ws.out, b, h, h_kv, c, d, ws.chunk,
        ws.splits, cuda_dtype(q.dtype), LOG2E / math.sqrt(d), rows, q_stride, CUDA_PATHS[path],
    )  # fmt: skip
    return ws.out
