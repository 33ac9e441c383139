"""GPU tier: the warp-specialized wgmma GEMM (gelu_linear_hopper.cu) against float64 on sm_90.

Shapes pick at the kernel's edges: M and N not multiples of the 128 x BLOCK_N tile (zero-filled
TMA rows, masked stores), an odd N (the scalar store path), K not a multiple of the 64-wide slice
(the zero-filled tail), K long enough that the stage ring wraps several times, and both tile
widths the launcher can choose, forced.
"""

from __future__ import annotations

import pytest
import torch

from rooflint.core.registry import get_family
from rooflint.engine import cuda_build
from rooflint.engine.correctness import check
from rooflint.kernels import gelu_linear

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("m,k,n", [(1, 8, 8), (130, 72, 200), (257, 776, 385), (1024, 768, 3072), (96, 2048, 512)])
@pytest.mark.parametrize("block_n", [0, 192, 256])
def test_warp_specialized_gemm_matches_float64(m, k, n, block_n):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the warp-specialized wgmma GEMM runs on sm_90 only")
    family = get_family("gelu_linear")
    library = cuda_build.load(cuda_build.family_source(gelu_linear.__file__, "gelu_linear_hopper"))
    for dtype in ("bf16", "fp16"):
        params = {"m": m, "k": k, "n": n}
        case = family.build_case("custom", params, dtype, torch.device("cuda"), seed=m + n)
        out = torch.empty((m, n), dtype=case["x"].dtype, device="cuda")
        gelu_linear.cuda_hopper_gelu_linear(library, case["x"], case["w"], case["b"], out, block_n)
        torch.cuda.synchronize()
        verdict = check(family, dtype, out, family.reference(case.inputs, params))
        print(f"gelu_linear cuda_hopper {m}x{k}->{n} block_n={block_n} {dtype}: relative error {verdict.error:.3g}")
        assert verdict.passed, f"{m}x{k}->{n} block_n={block_n} {dtype}: {verdict.message}"
