"""scaled_gemm's kernels against the float64 product of the dequantized operands, in Triton's CPU
interpreter (which multiplies fp8 and int8 tl.dot operands exactly, so the real fp8/int8 path runs)."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import assert_variant_matches_reference

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.scaled_gemm.triton import scaled_gemm

DTYPES = ["fp8_e4m3", "fp8_e5m2", "int8"]
# (m, k, n, scaling): TMA needs K and N multiples of 16, M is free. An M tail and two K steps of 32
# with a tail (176 = 5.5 x 32) under row scales; one row per tensor scale; 3 programs over 6 tiles,
# so the persistent loop's second pass (and the tile order) is checked.
SHAPES = [(97, 176, 80, "row"), (1, 48, 32, "tensor"), (64, 32, 96, "row")]


def _case(dtype, m, k, n, scaling, seed=0):
    family = get_family("scaled_gemm")
    params = {"m": m, "k": k, "n": n, "scaling": scaling}
    return family, family.build_case("custom", params, dtype, torch.device("cpu"), seed=seed)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n,scaling", SHAPES)
def test_triton_scaled_gemm_matches_float64(dtype, m, k, n, scaling):
    family, case = _case(dtype, m, k, n, scaling, seed=m + k)
    out = scaled_gemm(case["a"], case["b"], case["sa"], case["sb"])
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    verdict = check(family, dtype, out, family.reference(case.inputs, case.params))
    assert verdict.passed, verdict.message


def test_the_check_catches_a_scale_left_out():
    # The sb of each output column matters: applying sa alone is far outside the tolerance.
    family, case = _case("fp8_e4m3", 40, 64, 48, "row")
    out = scaled_gemm(case["a"], case["b"], case["sa"], torch.ones_like(case["sb"]))
    assert not check(family, "fp8_e4m3", out, family.reference(case.inputs, case.params)).passed


@pytest.mark.parametrize("dtype", DTYPES)
def test_eager_forms_match_float64_on_the_cpu(dtype):
    params = {"m": 33, "k": 80, "n": 48, "scaling": "row"}
    assert_variant_matches_reference("scaled_gemm", "eager", params, dtype)
    assert_variant_matches_reference("scaled_gemm", "eager_unfused", params, dtype)


def test_tma_alignment_is_refused_with_the_reason():
    _, case = _case("int8", 16, 40, 32, "tensor")
    with pytest.raises(ValueError, match="multiples of 16"):
        scaled_gemm(case["a"], case["b"], case["sa"], case["sb"])
    family = get_family("scaled_gemm")
    with pytest.raises(VariantSkipped, match="multiples of 16"):
        family.variants["triton"].build(case)
