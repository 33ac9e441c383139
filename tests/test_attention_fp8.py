"""attention in fp8 e4m3 (kernels/attention/fp8.py): per-tensor scaled codes in, bf16 out.

The Triton kernel runs Q K^T on the codes with the scales folded into the softmax's scale and P V in
bf16; the eager baseline dequantizes and calls SDPA. Both are checked against the float64 attention
of the dequantized inputs (the Triton interpreter on the CPU), over ragged N and both masks."""

from __future__ import annotations

import pytest
import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.core.selection import select_variants
from rooflint.engine.correctness import check

FAMILY = get_family("attention")


@pytest.mark.parametrize("variant", ["eager", "triton"])
@pytest.mark.parametrize(
    "params",
    [{"B": 1, "H": 2, "N": 37, "D": 64, "causal": True}, {"B": 2, "H": 1, "N": 40, "D": 128, "causal": False}],
    ids=["n37-d64-causal", "n40-d128"],
)
def test_fp8_attention_matches_float64_of_the_dequantized_inputs(variant, params):
    case = FAMILY.build_case("custom", params, "fp8_e4m3", torch.device("cpu"))
    assert case["q"].dtype == torch.float8_e4m3fn and case["sq"].dim() == 0
    out = FAMILY.variants[variant].build(case)()
    assert out.dtype == torch.bfloat16 and out.shape == case["q"].shape
    reference = FAMILY.reference(case.inputs, params)
    verdict = check(FAMILY, "fp8_e4m3", out, reference)
    assert verdict.passed, (verdict.error, verdict.tolerance)
    # The scales matter: the same codes read as if unscaled are far from the reference.
    unscaled = {name: case[name] for name in ("q", "k", "v")}
    assert not check(FAMILY, "fp8_e4m3", out, FAMILY.reference(unscaled, params)).passed


def test_fp8_cost_counts_one_byte_codes_bf16_out_and_the_scales():
    params = {"B": 4, "H": 32, "N": 4096, "D": 128, "causal": False}
    elements = 4 * 32 * 4096 * 128
    fp8_cost, bf16_cost = FAMILY.cost(params, "fp8_e4m3"), FAMILY.cost(params, "bf16")
    assert fp8_cost.bytes == 3 * elements + 3 * 4 + 2 * elements
    assert fp8_cost.tensor_flops == bf16_cost.tensor_flops
    assert FAMILY.tensor_precision("fp8_e4m3") == "fp8"


def test_only_variants_with_an_fp8_form_run_in_fp8():
    names = {variant.name for variant in select_variants(FAMILY, (), "fp8_e4m3")}
    assert names == {"eager", "triton", "flash_attn_3", "flash_attn_4"}
    assert "cuda_hopper" in {variant.name for variant in select_variants(FAMILY, (), "bf16")}


class FakeLibrary:
    """Stands in for an installed library: its ``function`` hands back ``attend``."""

    def __init__(self, attend):
        self.attend = attend

    def function(self, submodule, name):
        return self.attend


def test_flash_attn_4_fp8_on_hopper_is_skipped_naming_the_hopper_peer(monkeypatch):
    from rooflint.kernels.attention import library

    monkeypatch.setattr(library, "FLASH_ATTN_4", FakeLibrary(lambda q, k, v, causal: q))
    monkeypatch.setattr(library, "_capability", lambda case: (9, 0))
    case = FAMILY.build_case(
        "custom", {"B": 1, "H": 1, "N": 8, "D": 64, "causal": False}, "fp8_e4m3", torch.device("cpu")
    )
    with pytest.raises(VariantSkipped, match="Blackwell .*FlashAttention-3"):
        FAMILY.variants["flash_attn_4"].build(case)
    # A FlashAttention-3 without descales (an old release) is a skip naming why, not an error.
    monkeypatch.setattr(library, "FLASH_ATTN_3", FakeLibrary(lambda q, k, v, causal: q))
    with pytest.raises(VariantSkipped, match="no fp8 inputs"):
        FAMILY.variants["flash_attn_3"].build(case)


def test_flash_attn_3_gets_the_scales_as_per_kv_head_descales(monkeypatch):
    from rooflint.kernels.attention import library

    seen = {}

    def attend(q, k, v, causal, q_descale=None, k_descale=None, v_descale=None):
        seen.update(q=q_descale, k=k_descale, v=v_descale)
        return q.to(torch.bfloat16)

    monkeypatch.setattr(library, "FLASH_ATTN_3", FakeLibrary(attend))
    case = FAMILY.build_case(
        "custom", {"B": 2, "H": 3, "N": 8, "D": 64, "causal": False}, "fp8_e4m3", torch.device("cpu")
    )
    FAMILY.variants["flash_attn_3"].build(case)()
    for name, scale in (("q", "sq"), ("k", "sk"), ("v", "sv")):
        assert seen[name].shape == (2, 3) and seen[name].dtype == torch.float32
        assert torch.equal(seen[name], case[scale].float().expand(2, 3))
