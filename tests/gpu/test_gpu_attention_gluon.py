"""GPU tier: the Gluon attention (`triton_gluon`, kernels/attention/gluon.py) against float64 on an
sm_90 GPU, at each head dim it is built for (64, 128, and 256 with 64-key tiles). Gluon has no CPU
interpreter, so this is its only numerical check: N=1 (one key, one ragged tile), N=64 (at D=256 one
whole key tile, the first warpgroup's rows ending a tile before the second's), whole tiles (no mask
when not causal), ragged multi-tile N (the masked last tile, rows
of the next head loaded and given probability 0), enough tiles that the two-stage ring wraps many
times (mbarrier phases flip), both masks, fp16 and bf16; and identical bits over repeated calls (no
consumer reads a stage the producer is refilling)."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import assert_attention_matches_float64, assert_matches_float64, assert_repeatable

from rooflint.core.registry import get_family
from rooflint.kernels.attention import gluon as gluon_attention

pytestmark = pytest.mark.gpu


def _sm90_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    reason = gluon_attention.unsupported_reason(torch.device("cuda"), 128, torch.bfloat16)
    if reason:
        pytest.skip(reason)


@pytest.mark.parametrize("n", [1, 64, 128, 130, 256, 777, 2048])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", gluon_attention.HEAD_DIMS)
def test_gluon_attention_matches_float64(head_dim, n, causal):
    _sm90_or_skip()
    variant = get_family("attention").variants["triton_gluon"]
    assert_attention_matches_float64("triton_gluon", head_dim, n, causal, lambda case: variant.build(case)())


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", gluon_attention.HEAD_DIMS)
def test_gluon_attention_is_repeatable(head_dim, causal):
    _sm90_or_skip()
    family = get_family("attention")
    params = {"B": 4, "H": 8, "N": 2048, "D": head_dim, "causal": causal}
    case = family.build_case("custom", params, "bf16", torch.device("cuda"), seed=9)
    assert_repeatable(family.variants["triton_gluon"].build(case))


@pytest.mark.parametrize("split_tail", [True, False])
@pytest.mark.parametrize("n", [1000, 1024])
@pytest.mark.parametrize("head_dim", gluon_attention.HEAD_DIMS)
def test_gluon_attention_with_a_split_tail_matches_float64(head_dim, n, split_tail):
    """17 heads of 8 row blocks: 136 tiles, so on a 132-SM GPU 132 run whole and 4 in key ranges
    merged afterwards (attention/gluon_tail.py); on other SM counts the split covers other tiles. The
    same launch with split_tail=False runs every tile whole, and both match float64."""
    _sm90_or_skip()
    params = {"B": 1, "H": 17, "N": n, "D": head_dim, "causal": False}

    def attend(case):
        return gluon_attention.prepare(case["q"], case["k"], case["v"], False, split_tail=split_tail)()

    assert_matches_float64("attention", f"split_tail={split_tail} D={head_dim} N={n}", params, attend, seed=n)


def test_the_split_tail_is_repeatable():
    _sm90_or_skip()
    family = get_family("attention")
    case = family.build_case("custom", {"B": 1, "H": 17, "N": 1024, "D": 128, "causal": False}, "bf16",
                             torch.device("cuda"), seed=4)  # fmt: skip
    assert_repeatable(gluon_attention.prepare(case["q"], case["k"], case["v"], False))
