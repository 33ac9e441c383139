"""GPU tier: gelu_linear in fp8, its three variants against float64 over odd shapes: eager
(torch._scaled_mm with the bias, then F.gelu), triton_fp8 (scaled_gemm's Triton kernel with the
GELU_BIAS epilogue, the one-MUFU tanh on the GPU) and cuda_fp8 (scaled_gemm_hopper.cu's GELU
instantiation, sm_90 only).

Shapes: one row; M, N and K tails of every tile (97 x 176 -> 80); an odd N (the CUDA kernel's scalar
store path; cuBLASLt and TMA refuse it: their skips must name the reason); K not a multiple of the
128-code slice with 9 slices; GPT-2's MLP up over 1024 tokens and in a decode step of 8; and more
tiles than SMs, so each persistent CTA runs the epilogue for several tiles.
"""

from __future__ import annotations

import pytest
import torch
from kernel_checks import assert_repeatable

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")
SHAPES = [(1, 16, 16), (97, 176, 80), (300, 1040, 528), (257, 4096, 385), (1024, 768, 3072), (8, 768, 3072),
          (2048, 512, 4096)]  # fmt: skip
VARIANTS = ["eager", "triton_fp8", "cuda_fp8"]


def _needs_fp8():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 tensor cores need sm_89 or newer")


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_fp8_variant_matches_float64(variant, dtype, m, k, n):
    _needs_fp8()
    family = get_family("gelu_linear")
    case = family.build_case("custom", {"m": m, "k": k, "n": n}, dtype, CUDA, seed=m + n)
    try:
        run = family.variants[variant].build(case)
    except VariantSkipped as skipped:
        print(f"gelu_linear {variant} {dtype} {case.shape}: skipped: {skipped}")
        # Only these may be refused: the CUDA kernel off sm_90, and an N off the 16-byte pitch where
        # cuBLASLt and the Triton kernel's TMA store need it (the CUDA kernel stores odd N itself).
        off_hopper = variant == "cuda_fp8" and torch.cuda.get_device_capability() != (9, 0)
        assert off_hopper or (variant != "cuda_fp8" and n % 16), skipped
        return
    out = run()
    torch.cuda.synchronize()
    verdict = check(family, dtype, out, family.reference(case.inputs, case.params))
    print(f"gelu_linear {variant} {dtype} {case.shape}: relative error {verdict.error:.3g}")
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("variant", ["triton_fp8", "cuda_fp8"])
def test_fp8_gelu_epilogue_is_repeatable(variant):
    """An epilogue that reads a bias or scale from the wrong tile, or a stage handed back early,
    shows as calls that differ: 20 calls over 2 tiles a CTA must agree."""
    _needs_fp8()
    family = get_family("gelu_linear")
    case = family.build_case("custom", {"m": 2048, "k": 8192, "n": 4096}, "fp8_e4m3", CUDA, seed=3)
    try:
        run = family.variants[variant].build(case)
    except VariantSkipped as skipped:
        pytest.skip(str(skipped))
    assert_repeatable(run)
