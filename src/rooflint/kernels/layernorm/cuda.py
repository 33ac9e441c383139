"""layernorm: cuda implementation."""

from __future__ import annotations

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype
from rooflint.kernels.layernorm import EPS, FAMILY, _outputs

LAYERNORM_CU = cuda_build.family_source(__file__, "layernorm")


def cuda_layernorm(library, x, weight, bias, y, mean=None, rstd=None, *, gelu=False, threads=0, eps: float = EPS):
    """Launch the CUDA kernel (layernorm.cu); threads 0 picks its default. Returns y."""
    rows, hidden = x.shape
    stats = mean is not None
    mean_buf, rstd_buf = (mean, rstd) if stats else (y, y)  # never written when stats is off
    library.launch(
        "rooflint_layernorm",
        x,
        weight,
        bias,
        y,
        mean_buf,
        rstd_buf,
        rows,
        hidden,
        threads,
        gelu,
        stats,
        cuda_dtype(x.dtype),
        float(eps),
    )
    return y


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC), sources=(LAYERNORM_CU,))
def cuda_variant(case):
    """CUDA C++, one block per row, row in registers as 16-byte vectors, warp-shuffle reductions"""
    library = cuda_build.load(LAYERNORM_CU)
    x, w, b = case["x"].contiguous(), case["weight"], case["bias"]
    y, mean, rstd = _outputs(x)
    return lambda: (cuda_layernorm(library, x, w, b, y, mean, rstd), mean, rstd)
