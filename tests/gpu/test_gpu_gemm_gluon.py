"""GPU tier: the Gluon GEMM (gelu_linear's `triton_gluon`, kernels/_gemm_gluon.py) against float64 on
an sm_90 GPU. Gluon has no CPU interpreter, so this is its only numerical check. Shapes pick at its
edges: M and N not multiples of the 128 x 192 tile (zero-filled TMA reads, TMA stores clipped at M
and N), a tile whose 64-wide side lies wholly past N, K shorter than one 64-deep step and not a
multiple of it (the zero-filled tail), K long enough that the 4-stage ring wraps many times (mbarrier
phases flip), and tile counts above a wave (the grouped raster's last, partial group); and identical
bits over repeated calls (no consumer reads a stage the producer is refilling)."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import assert_matches_float64, assert_repeatable

from rooflint.core.registry import get_family
from rooflint.kernels import _gemm_gluon

pytestmark = pytest.mark.gpu


def _sm90_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    reason = _gemm_gluon.unsupported_reason(torch.device("cuda"), torch.bfloat16, 64, 64)
    if reason:
        pytest.skip(reason)


@pytest.mark.parametrize(
    "m,k,n", [(1, 8, 8), (130, 72, 200), (257, 776, 384), (1024, 768, 3072), (96, 2048, 520), (1500, 264, 2000)]
)
def test_gluon_gemm_matches_float64(m, k, n):
    _sm90_or_skip()
    variant = get_family("gelu_linear").variants["triton_gluon"]
    params = {"m": m, "k": k, "n": n}
    assert_matches_float64(
        "gelu_linear", f"triton_gluon {m}x{k}->{n}", params, lambda case: variant.build(case)(), m + n
    )


def test_gluon_gemm_is_repeatable():
    _sm90_or_skip()
    family = get_family("gelu_linear")
    case = family.build_case("custom", {"m": 1024, "k": 2048, "n": 3072}, "bf16", torch.device("cuda"), seed=3)
    assert_repeatable(family.variants["triton_gluon"].build(case), calls=30)
