"""vector_add: cuda implementation."""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype
from rooflint.kernels.vector_add import FAMILY

VECTOR_ADD_CU = cuda_build.family_source(__file__, "vector_add")


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC), sources=(VECTOR_ADD_CU,))
def cuda_variant(case):
    """CUDA C++, 16-byte vectors, grid-stride"""
    library = cuda_build.load(VECTOR_ADD_CU)
    a, b = case["a"], case["b"]
    out = torch.empty_like(a)

    def run():
        library.launch("rooflint_vector_add", a, b, out, a.numel(), cuda_dtype(a.dtype))
        return out

    return run
