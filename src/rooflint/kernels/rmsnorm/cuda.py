"""rmsnorm: the CUDA kernel (rmsnorm.cu), one block per row, the row in registers."""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype
from rooflint.kernels.rmsnorm import EPS, FAMILY

RMSNORM_CU = cuda_build.family_source(__file__, "rmsnorm")


def cuda_rmsnorm(
    library, x, weight, y, residual=None, h=None, *, eps: float = EPS, threads_per_row: int = 0, block_threads: int = 0
):
    """Launch rooflint_rmsnorm; with ``residual``, h = x + residual is written to ``h`` and normalized.
    ``threads_per_row`` and ``block_threads``: 0 for the kernel's defaults (a launch-shape sweep sets them)."""
    rows, hidden = x.shape
    library.launch(
        "rooflint_rmsnorm",
        x,
        residual,
        weight,
        y,
        h,
        rows,
        hidden,
        threads_per_row,
        block_threads,
        cuda_dtype(x.dtype),
        float(eps),
    )
    return y if residual is None else (y, h)


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC), sources=(RMSNORM_CU,))
def cuda_variant(case):
    """CUDA C++, one block per row, the row in registers as 16-byte vectors, the residual add fused"""
    library = cuda_build.load(RMSNORM_CU)
    x, w = case["x"].contiguous(), case["weight"]
    residual = case.inputs.get("residual")
    y = torch.empty_like(x)
    h = torch.empty_like(x) if residual is not None else None
    return lambda: cuda_rmsnorm(library, x, w, y, residual, h)
