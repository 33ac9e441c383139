"""gelu_linear: cuda implementation."""

from __future__ import annotations

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype
from rooflint.kernels.gelu_linear import FAMILY, FLOAT_DTYPES

GELU_LINEAR_CU = cuda_build.family_source(__file__, "gelu_linear")
GELU_LINEAR_HOPPER_CU = cuda_build.family_source(__file__, "gelu_linear_hopper")


def cuda_gelu_linear(library, x, w, b, out, config: int = -1):
    """config -1 lets the launcher choose; 0 forces mma.sync 128x128, 1 wgmma 128x256 (Hopper)."""
    m, k = x.shape
    library.launch("rooflint_gelu_linear", x, w, b, out, m, w.shape[0], k, cuda_dtype(x.dtype), config)
    return out


@FAMILY.variant(
    "cuda",
    needs=(NEEDS_CUDA, NEEDS_NVCC),
    dtypes=FLOAT_DTYPES,
    sources=(GELU_LINEAR_CU,),
)
def cuda_variant(case):
    """CUDA C++: cp.async ring into wgmma m64n256k16 (Hopper) or mma.sync m16n8k16; fused bias/GELU"""
    if torch.cuda.get_device_capability(case.device)[0] < 8:
        raise VariantSkipped("needs sm_80 or newer (bf16 mma.sync, cp.async)")
    x, w, b = case["x"], case["w"], case["b"]
    if x.shape[1] % 8:
        raise VariantSkipped("the CUDA kernel copies K in 16-byte chunks: K must be a multiple of 8")
    library = cuda_build.load(GELU_LINEAR_CU)
    out = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
    return lambda: cuda_gelu_linear(library, x, w, b, out)


@FAMILY.variant(
    "cuda_hopper",
    kind="cuda",
    needs=(NEEDS_CUDA, NEEDS_NVCC),
    dtypes=FLOAT_DTYPES,
    sources=(GELU_LINEAR_HOPPER_CU,),
)
def cuda_hopper_variant(case):
    """sm_90 only: warp-specialized wgmma GEMM (a TMA producer warpgroup, two consumers), fused bias/GELU"""
    if torch.cuda.get_device_capability(case.device) != (9, 0):
        raise VariantSkipped("the warp-specialized wgmma GEMM needs an sm_90 GPU (Hopper); `cuda` is the sm_80 path")
    x, w, b = case["x"], case["w"], case["b"]
    if x.shape[1] % 8:
        raise VariantSkipped("TMA copies rows of 16-byte multiples: K must be a multiple of 8")
    library = cuda_build.load(GELU_LINEAR_HOPPER_CU)
    out = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
    return lambda: cuda_hopper_gelu_linear(library, x, w, b, out)


def cuda_hopper_gelu_linear(library, x, w, b, out, block_n: int = 0, cluster: int = 0):
    """block_n 0 lets the launcher choose the tile width from the SM count; 192 or 256 force it.
    cluster 0 pairs neighbouring row blocks (TMA multicast of the shared W slice) where the grid is
    more than one wave; 1 or 2 force it."""
    m, k = x.shape
    n, dtype = w.shape[0], cuda_dtype(x.dtype)
    library.launch("rooflint_gelu_linear_hopper", x, w, b, out, m, n, k, dtype, block_n, cluster)
    return out
