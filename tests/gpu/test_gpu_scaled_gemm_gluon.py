"""GPU tier: scaled_gemm's Gluon block-scaled GEMM (`triton_gluon`, kernels/scaled_gemm/gluon.py)
against float64 on sm_90. Gluon has no CPU interpreter, so this is its only numerical check.

Its edges: M and N not multiples of the 128 x 128 tile (zero-filled TMA reads, TMA stores clipped at
M and N, the masked sa rows past M), K not a multiple of the 128-wide scale block (the zero-filled
tail is the last block's), K of one block, K long enough that the 4-stage ring wraps many times
(mbarrier phases flip), grids with more tiles than SMs (each persistent CTA carries its ring's count
and its output buffers' stores from one tile into the next), other ring depths, and the three
formats; and identical bits over repeated calls (no consumer reads a stage being refilled).
"""

from __future__ import annotations

import pytest
import torch
from kernel_checks import assert_repeatable

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.scaled_gemm import gluon as sg

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")
# (m, k, n): one row; tails of M, N and of the scale block; one K block; a long K; more tiles than
# SMs (2048 x 4096: 512 tiles of 128 x 128 on 132 SMs).
SHAPES = [(1, 128, 16), (97, 176, 80), (300, 1040, 528), (257, 128, 392), (129, 4096, 136), (2048, 512, 4096)]


def _sm90_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    reason = sg.unsupported_reason(CUDA)
    if reason:
        pytest.skip(reason)


def _case(dtype, m, k, n, seed, scaling="block"):
    family = get_family("scaled_gemm")
    return family, family.build_case("custom", {"m": m, "k": k, "n": n, "scaling": scaling}, dtype, CUDA, seed=seed)


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2", "int8"])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_gluon_block_scaled_gemm_matches_float64(dtype, m, k, n):
    _sm90_or_skip()
    family, case = _case(dtype, m, k, n, seed=m + k + n)
    out = family.variants["triton_gluon"].build(case)()
    torch.cuda.synchronize()
    verdict = check(family, dtype, out, family.reference(case.inputs, case.params))
    print(f"scaled_gemm triton_gluon {dtype} {case.shape}: relative error {verdict.error:.3g}")
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("stages", [2, 5])
def test_gluon_block_scaled_gemm_takes_other_ring_depths(stages):
    _sm90_or_skip()
    family, case = _case("fp8_e4m3", 300, 1040, 528, seed=stages)
    out = family.variants["triton_gluon"].build(case, config={**sg.GEMM_CONFIG, "STAGES": stages})()
    torch.cuda.synchronize()
    verdict = check(family, "fp8_e4m3", out, family.reference(case.inputs, case.params))
    assert verdict.passed, verdict.message


def test_gluon_block_scaled_gemm_is_repeatable():
    """A stage handed back before its wgmmas retired, or an output buffer rewritten before its TMA
    store read it, shows as calls that differ: 20 calls over 4 tiles a CTA must agree."""
    _sm90_or_skip()
    family, case = _case("fp8_e4m3", 2048, 4096, 4096, seed=3)
    assert_repeatable(family.variants["triton_gluon"].build(case), calls=20)


def test_the_gluon_variant_refuses_other_scalings_with_the_reason():
    _sm90_or_skip()
    family = get_family("scaled_gemm")
    for scaling in ("tensor", "row"):
        _, case = _case("fp8_e4m3", 64, 256, 64, seed=0, scaling=scaling)
        with pytest.raises(VariantSkipped, match="per-tensor and per-row scales run in the triton variant"):
            family.variants["triton_gluon"].build(case)
