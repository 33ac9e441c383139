"""layernorm_backward: cuda implementation."""

from __future__ import annotations

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype
from rooflint.kernels.layernorm_backward import (
    CUDA_PROGRAMS_PER_SM,
    FAMILY,
    allocate,
    fused_modeled_bytes,
    num_programs,
)

LAYERNORM_BACKWARD_CU = cuda_build.family_source(__file__, "layernorm_backward")


def cuda_layernorm_backward(x, dy, weight, mean, rstd, *, capacity=None, library=None, out=None):
    """The launcher sizes its own grid from the kernel's occupancy, up to `capacity` partial rows."""
    library = library or cuda_build.load(LAYERNORM_BACKWARD_CU)
    rows, n = x.shape
    capacity = out[3].shape[1] if out else capacity or num_programs(rows, x.device, per_sm=CUDA_PROGRAMS_PER_SM)
    dx, dweight, dbias, partial = out or allocate(x, weight, capacity)
    library.launch(
        "rooflint_layernorm_backward",
        *(x, dy, weight, mean, rstd, dx, dweight, dbias, partial),
        *(rows, n, capacity, cuda_dtype(x.dtype)),
    )
    return dx, dweight, dbias


def cuda_modeled_bytes(params, dtype):
    # The CUDA launcher keeps 2 blocks resident per SM at the large size (its register count), so
    # 2 partial rows per SM.
    return fused_modeled_bytes(params, dtype, per_sm=2)


@FAMILY.variant(
    "cuda",
    needs=(NEEDS_CUDA, NEEDS_NVCC),
    modeled_bytes=cuda_modeled_bytes,
    sources=(LAYERNORM_BACKWARD_CU,),
)
def cuda_variant(case):
    """CUDA C++: rows in registers, next row prefetched, fp32 partials and a second sum kernel"""
    library = cuda_build.load(LAYERNORM_BACKWARD_CU)
    args = case["x"], case["dy"], case["weight"], case["mean"], case["rstd"]
    # Room for 4 blocks per SM; the launcher uses as many as are resident together.
    out = allocate(case["x"], case["weight"], num_programs(case["x"].shape[0], case["x"].device, CUDA_PROGRAMS_PER_SM))
    return lambda: cuda_layernorm_backward(*args, library=library, out=out)
