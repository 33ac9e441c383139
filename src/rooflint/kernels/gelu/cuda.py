"""gelu: cuda implementation."""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype
from rooflint.kernels.gelu import FAMILY, _check_layout

GELU_CU = cuda_build.family_source(__file__, "gelu")


def cuda_gelu(x, bias, scale, out=None, rows_in_flight=0):
    _check_layout(x, bias)
    library = cuda_build.load(GELU_CU)
    out = torch.empty_like(x) if out is None else out
    rows, cols = x.shape
    library.launch("rooflint_gelu", x, bias, out, rows, cols, cuda_dtype(x.dtype), rows_in_flight, float(scale))
    return out


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC), sources=(GELU_CU,))
def cuda_variant(case):
    """CUDA C++, 16-byte vectors, 4 rows in flight a thread, bias held in registers"""
    x, bias, scale = case["x"], case["bias"], case["scale"]
    out = torch.empty_like(x)
    return lambda: cuda_gelu(x, bias, scale, out)
