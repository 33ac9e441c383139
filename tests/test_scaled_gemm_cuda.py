"""scaled_gemm's CUDA variant, what a CPU can check: which operands the fp8 wgmma kernel takes and
the reason it gives for the rest (the kernel itself runs in tests/gpu/test_scaled_gemm_cuda_gpu.py)."""

from __future__ import annotations

import pytest
import torch

from rooflint.core.registry import get_family
from rooflint.kernels.scaled_gemm.cuda import why_not

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _codes(dtype, rows, k):
    return torch.zeros(rows, k, dtype=dtype)


@pytest.mark.parametrize("a_dtype", [E4M3, E5M2])
@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_fp8_operands_with_epilogue_scales_are_taken(a_dtype, scaling):
    assert why_not(_codes(a_dtype, 3, 48), _codes(E4M3, 5, 48), scaling) is None


@pytest.mark.parametrize(
    "a_dtype,b_dtype,k,scaling,reason",
    [
        (torch.int8, torch.int8, 48, "row", "int8 runs in the triton variant"),
        (E5M2, E5M2, 48, "row", "an e4m3 B"),
        (E4M3, E4M3, 48, "block", "per-block scales run in the triton variant"),
        (E4M3, E4M3, 40, "tensor", "K must be a multiple of 16"),
    ],
)
def test_the_rest_is_refused_with_the_reason(a_dtype, b_dtype, k, scaling, reason):
    assert reason in why_not(_codes(a_dtype, 3, k), _codes(b_dtype, 5, k), scaling)


def test_the_variant_is_declared_for_the_fp8_dtypes_only():
    variant = get_family("scaled_gemm").variants["cuda"]
    assert set(variant.dtypes) == {"fp8_e4m3", "fp8_e5m2"} and variant.kind == "cuda"
