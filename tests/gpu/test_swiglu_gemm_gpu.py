"""GPU tier: swiglu's fused GEMM (kernels/swiglu/triton_gemm.py) on TMA and wgmma, each of its tiles
forced and the autotuned choice, against float64 at odd shapes and at Llama's, with and without a
bias; and level with the unfused form (cuBLAS, then the elementwise kernel) within its rounding."""

from __future__ import annotations

import pytest
import torch

from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.swiglu import triton_gemm

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")
# (rows, inter, hidden): M, N and K tails against every tile; Llama-3.2-1B's prefill gate/up at 2048
# rows; Llama-3.1-8B's widths at rows that leave the big tile's last wave part empty.
SHAPES = [(1000, 3000, 1032), (2048, 8192, 2048), (257, 14336, 4096), (17, 24, 8)]
TILES = triton_gemm.tiles()


def _hopper_or_skip():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("TMA needs sm_90 or newer")


@pytest.mark.parametrize("tile", [None, *TILES], ids=lambda t: "autotuned" if t is None else
                         f"{t['BLOCK_M']}x2x{t['BLOCK_N']}x{t['BLOCK_K']}s{t['num_stages']}")  # fmt: skip
@pytest.mark.parametrize("rows,inter,hidden", SHAPES)
@pytest.mark.parametrize("bias", [False, True])
def test_the_fused_gemm_matches_float64(rows, inter, hidden, bias, tile):
    _hopper_or_skip()
    family = get_family("swiglu")
    params = {"rows": rows, "inter": inter, "hidden": hidden}
    for dtype in ("bf16", "fp16"):
        case = family.build_case("custom", params, dtype, CUDA, seed=5)
        x, w = case["x"], case["weight"]
        b = torch.randn(2 * inter, device=CUDA).to(w.dtype) if bias else None
        out = torch.full((rows, inter), float("nan"), dtype=x.dtype, device=CUDA)
        triton_gemm.gemm_swiglu(x, w, b, out, config=tile)
        torch.cuda.synchronize()
        gate, up = (x.double() @ w.double().T + (b.double() if bias else 0)).chunk(2, dim=-1)
        verdict = check(family, dtype, out, gate * torch.sigmoid(gate) * up)
        print(f"{params} bias={bias} {dtype} {tile}: relative error {verdict.error:.3g}")
        assert not out.isnan().any()
        assert verdict.passed, verdict.message


def test_the_fused_gemm_is_level_with_the_unfused_form_and_repeatable():
    _hopper_or_skip()
    family = get_family("swiglu")
    case = family.build_case("custom", {"rows": 4096, "inter": 8192, "hidden": 2048}, "bf16", CUDA, seed=2)
    fused = family.variants["triton_gemm"].build(case)
    unfused = family.variants["triton"].build(case)
    first = fused().clone()
    for _ in range(5):  # a persistent program that reused a stage too early would change some bits
        assert torch.equal(fused(), first)
    # both round gate and up to bf16 before the activation; cuBLAS and wgmma sum K in other orders
    torch.testing.assert_close(first, unfused(), rtol=1.6e-2, atol=1e-3)
