"""GPU tier: attention in fp8 e4m3 against the float64 attention of the dequantized inputs.

The Triton kernel's Q K^T runs on the fp8 tensor cores here (the CPU interpreter widens the codes),
so ragged N, both masks and both head dims are checked where the MMAs are real; FlashAttention-3's
fp8 forward, where installed, is held to the same gate."""

from __future__ import annotations

import pytest
import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check

pytestmark = pytest.mark.gpu
FAMILY = get_family("attention")


def _fp8_gpu_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip(f"fp8 tensor cores need sm_89+, this is {torch.cuda.get_device_name()}")


@pytest.mark.parametrize("variant", ["triton", "eager", "flash_attn_3"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("n, causal", [(1, False), (130, True), (777, False), (1024, True)])
def test_fp8_attention_matches_float64(variant, d, n, causal):
    _fp8_gpu_or_skip()
    params = {"B": 2, "H": 3, "N": n, "D": d, "causal": causal}
    case = FAMILY.build_case("custom", params, "fp8_e4m3", torch.device("cuda"), seed=n + d)
    try:
        run = FAMILY.variants[variant].build(case)
    except VariantSkipped as why:
        pytest.skip(str(why))
    out = run()
    torch.cuda.synchronize()
    assert out.dtype == torch.bfloat16
    verdict = check(FAMILY, "fp8_e4m3", out, FAMILY.reference(case.inputs, params))
    assert verdict.passed, f"{variant}: relative error {verdict.error:.3g} > {verdict.tolerance:.3g}"
