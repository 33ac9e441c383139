"""GPU tier: the Gluon GEMM (gelu_linear's `triton_gluon`, kernels/gelu_linear/gluon.py) against float64 on
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
from rooflint.kernels.gelu_linear import gluon as gemm_gluon

pytestmark = pytest.mark.gpu


def _sm90_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    reason = gemm_gluon.unsupported_reason(torch.device("cuda"), torch.bfloat16, 64, 64)
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


def test_a_traced_launch_gives_the_same_bits_and_ordered_stamps():
    """The phase trace (a launch with trace=, stamps per CTA) must not change what the kernel computes, and
    each CTA's stamps must follow its schedule: start, first bytes, every K step in order, last wgmma
    retired, stores issued, stores done; the producer starts before its last load is issued."""
    _sm90_or_skip()
    family = get_family("gelu_linear")
    case = family.build_case("custom", {"m": 1024, "k": 768, "n": 3072}, "bf16", torch.device("cuda"), seed=5)
    x, w, b = case["x"], case["w"], case["b"]
    ctas, k_steps = gemm_gluon.cta_count(1024, 3072), 768 // gemm_gluon.BLOCK_K
    trace = gemm_gluon.trace_buffer(1024, 3072, "cuda")
    plain = gemm_gluon.prepare(x, w, b)().clone()
    traced = gemm_gluon.prepare(x, w, b, trace=trace)()
    assert torch.equal(plain, traced)
    fields = len(gemm_gluon.TRACE_FIELDS)
    for cta, row in enumerate(trace.view(ctas, -1).cpu().tolist()):
        get = dict(zip(gemm_gluon.TRACE_FIELDS, row, strict=False))
        steps = row[fields : fields + k_steps]
        assert 0 < get["ns_start"] <= get["ns_end"], (cta, get)
        # Consumer 0 stamps the K steps; consumer 1 waits on the same stages, so its last wgmma retires
        # after the first step's bytes landed (its own order is checked, not against consumer 0's).
        order = [get["start"], *steps, get["mma_done"], get["stores_issued"], get["stores_done"]]
        assert order == sorted(order) and get["start"] > 0, (cta, order)
        order = [steps[0], get["c1_mma_done"], get["c1_stores_issued"], get["c1_stores_done"]]
        assert order == sorted(order), (cta, "consumer 1", order)
        assert get["producer_start"] <= get["producer_done"], (cta, get)
        assert row[fields + k_steps :] == [0] * (gemm_gluon.TRACE_STEPS - k_steps), (cta, "steps past K written")
