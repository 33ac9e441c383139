"""gelu_linear in fp8: the Triton kernel's GELU_BIAS epilogue (scaled_gemm's kernel) in Triton's CPU
interpreter, which multiplies fp8 tl.dot operands exactly, and the eager form on the CPU, each against
the float64 GELU of the dequantized product plus the bias; the registry (bf16 rows unchanged, fp8
rows beside them), the cost model and the roof it is placed under."""

from __future__ import annotations

import math

import pytest
import torch
from kernel_checks import assert_variant_matches_reference

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.core.roofline import floor_seconds
from rooflint.core.selection import select_dtypes, select_variants
from rooflint.core.specs import get_spec
from rooflint.engine.correctness import check
from rooflint.kernels.scaled_gemm.triton import scaled_gemm

FP8 = ["fp8_e4m3", "fp8_e5m2"]
# (m, k, n): an M tail and a K tail of the 32-wide K step (176 = 5.5 x 32); one row; 3 programs over
# 6 tiles, so the persistent loop's second pass runs the epilogue again. K and N multiples of 16 (TMA).
SHAPES = [(97, 176, 80), (1, 48, 32), (64, 32, 96)]
# The bf16 rows as they were before fp8 joined the family: the same variants, in the same order.
BF16_VARIANTS = [
    "eager", "eager_unfused", "compile_builtin", "compile_unfused",
    "triton", "triton_gluon", "triton_wavefit", "cuda", "cuda_hopper",
]  # fmt: skip


def _case(dtype, m, k, n, seed=0):
    family = get_family("gelu_linear")
    return family, family.build_case("custom", {"m": m, "k": k, "n": n}, dtype, torch.device("cpu"), seed=seed)


def _verdict(family, dtype, case, out):
    return check(family, dtype, out, family.reference(case.inputs, case.params))


@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_triton_fp8_gelu_epilogue_matches_float64(dtype, m, k, n):
    family, case = _case(dtype, m, k, n, seed=m + k)
    out = scaled_gemm(case["x"], case["w"], case["sx"], case["sw"], gelu_bias=case["b"])
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    verdict = _verdict(family, dtype, case, out)
    assert verdict.passed, verdict.message


@pytest.mark.filterwarnings("ignore:overflow encountered in exp2")  # GELU of z << 0: 2^inf, the -0 limit
def test_the_check_catches_an_epilogue_without_the_gelu_or_the_bias():
    family, case = _case("fp8_e4m3", 40, 64, 48)
    x, w, sx, sw, b = case["x"], case["w"], case["sx"], case["sw"], case["b"]
    assert not _verdict(family, "fp8_e4m3", case, scaled_gemm(x, w, sx, sw)).passed  # no bias, no GELU
    assert not _verdict(family, "fp8_e4m3", case, scaled_gemm(x, w, sx, sw, gelu_bias=torch.zeros_like(b))).passed
    assert not _verdict(family, "fp8_e4m3", case, scaled_gemm(x, w, sx, torch.ones_like(sw), gelu_bias=b)).passed


@pytest.mark.parametrize("dtype", FP8)
def test_the_eager_baseline_runs_scaled_mm_then_gelu_on_the_cpu(dtype):
    # torch's CPU build runs _scaled_mm's per-row form with a bias; a build that refuses it makes the
    # row a skip carrying torch's first line (scaled_gemm.first_call_or_skip), never a failed row.
    try:
        assert_variant_matches_reference("gelu_linear", "eager", {"m": 33, "k": 80, "n": 48}, dtype)
    except VariantSkipped as skipped:
        assert "torch._scaled_mm refuses this case" in str(skipped)


def test_bf16_rows_are_unchanged_and_fp8_rows_exist():
    family = get_family("gelu_linear")
    assert family.default_dtypes == ("bf16",) and select_dtypes(family) == ("bf16",)
    for dtype in ("bf16", "fp16"):
        assert [v.name for v in select_variants(family, dtype=dtype)] == BF16_VARIANTS
    for dtype in FP8:
        assert [v.name for v in select_variants(family, dtype=dtype)] == ["eager", "triton_fp8", "cuda_fp8"]
    assert family.baseline.name == "eager"  # fp8 speedups divide by torch._scaled_mm's time
    assert [v.name for v in select_variants(family, ["triton"], "fp8_e4m3")] == ["triton_fp8"]


def test_fp8_cost_counts_codes_scales_bias_and_a_bf16_output_under_the_fp8_roof():
    family = get_family("gelu_linear")
    m, k, n = 1024, 768, 3072
    fp8, bf16 = family.cost({"m": m, "k": k, "n": n}, "fp8_e4m3"), family.cost({"m": m, "k": k, "n": n}, "bf16")
    assert fp8.bytes == m * k + n * k + 4 * (m + n) + 2 * n + 2 * m * n
    assert fp8.tensor_flops == bf16.tensor_flops == 2 * m * n * k
    assert fp8.cuda_flops == bf16.cuda_flops + 2 * m * n  # the two scales of each output
    assert family.tensor_precision("fp8_e4m3") == family.tensor_precision("fp8_e5m2") == "fp8"
    h100, square = get_spec("h100_sxm"), {"m": 8192, "k": 8192, "n": 8192}
    seconds, bound = floor_seconds(family.cost(square, "fp8_e4m3"), h100, family.tensor_precision("fp8_e4m3"))
    fp8_peak = h100.tensor_peak_tflops("fp8") * 1e12  # 1,979 TFLOP/s, twice bf16's: the roof of these rows
    assert bound == "compute" and seconds == pytest.approx(2 * 8192**3 / fp8_peak, rel=0.01)


def test_only_the_fp8_eager_form_models_the_unfused_gelu_round_trip():
    variant, params = get_family("gelu_linear").variants["eager"], {"m": 8, "k": 768, "n": 3072}
    assert math.isnan(variant.modeled_bytes(params, "bf16"))  # the fused epilogue: the ideal bytes
    ideal = get_family("gelu_linear").cost(params, "fp8_e4m3").bytes
    assert variant.modeled_bytes(params, "fp8_e4m3") == ideal + 4 * 8 * 3072


@pytest.mark.parametrize("variant", ["triton_fp8", "cuda_fp8"])
def test_a_k_off_the_tma_pitch_is_skipped_with_the_reason(variant):
    family, case = _case("fp8_e4m3", 16, 40, 32)
    with pytest.raises(VariantSkipped, match="multiple"):
        family.variants[variant].build(case)
