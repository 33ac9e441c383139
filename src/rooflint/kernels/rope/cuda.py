"""rope: cuda implementation."""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype
from rooflint.kernels.rope import FAMILY, THETA, _table_modeled

ROPE_CU = cuda_build.family_source(__file__, "rope")


def _cuda_runner(case, fused):
    library = cuda_build.load(ROPE_CU)
    q, k, cos, sin = case["q"], case["k"], case["cos"], case["sin"]
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    b, s, h, d = q.shape

    def run():
        library.launch(
            "rooflint_rope", q, k, q_out, k_out, cos, sin, b * s, s, h, d, int(fused), cuda_dtype(q.dtype), THETA
        )
        return q_out, k_out

    return run


@FAMILY.variant(
    "cuda_table",
    kind="cuda",
    needs=(NEEDS_CUDA, NEEDS_NVCC),
    modeled_bytes=_table_modeled,
    sources=(ROPE_CU,),
)
def cuda_table(case):
    """CUDA C++, a block per position, table row staged in shared memory, 16-byte vectors"""
    return _cuda_runner(case, fused=False)


@FAMILY.variant("cuda_fused", kind="cuda", needs=(NEEDS_CUDA, NEEDS_NVCC), sources=(ROPE_CU,))
def cuda_fused(case):
    """CUDA C++, a block per position, sincosf into shared memory, 16-byte vectors"""
    return _cuda_runner(case, fused=True)
