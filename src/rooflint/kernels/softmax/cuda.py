"""softmax: cuda implementation."""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype
from rooflint.kernels.softmax import FAMILY, _check_layout

SOFTMAX_CU = cuda_build.family_source(__file__, "softmax")

# CUDA paths (softmax.cu): auto picks by row width (registers up to 32768 columns).
CUDA_MODES = {"auto": 0, "registers": 1, "looped": 2}


def cuda_softmax(x, out=None, threads=0, mode="auto"):
    _check_layout(x)
    library = cuda_build.load(SOFTMAX_CU)
    out = torch.empty_like(x) if out is None else out
    rows, cols = x.shape
    library.launch("rooflint_softmax", x, out, rows, cols, cuda_dtype(x.dtype), threads, CUDA_MODES[mode])
    return out


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC), sources=(SOFTMAX_CU,))
def cuda_variant(case):
    """CUDA C++: a block per row cached on chip, online two-pass for rows over 32768"""
    x = case["x"]
    out = torch.empty_like(x)
    return lambda: cuda_softmax(x, out)
