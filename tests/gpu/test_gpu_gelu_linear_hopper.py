"""GPU tier: the warp-specialized wgmma GEMM (gelu_linear_hopper.cu) against float64 on sm_90.

Shapes pick at the kernel's edges: M and N not multiples of the 128 x BLOCK_N tile (zero-filled
TMA rows, masked stores), an odd N (the scalar store path), K not a multiple of the 64-wide slice
(the zero-filled tail), K long enough that the stage ring wraps several times, both tile
widths the launcher can choose, forced, and CTA pairs (clusters of 2 sharing the W slice by TMA
multicast) forced on and off: with an odd count of row blocks (257 and 130 rows) the pair's second
CTA lies wholly past M, loads zeros, serves its half of W and stores nothing.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from kernel_checks import assert_matches_float64

from rooflint.core.registry import get_family
from rooflint.engine import cuda_build
from rooflint.engine.correctness import check
from rooflint.kernels import gelu_linear
from rooflint.kernels.gelu_linear import wavefit
from rooflint.kernels.gelu_linear.cuda import cuda_hopper_gelu_linear

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("m,k,n", [(1, 8, 8), (130, 72, 200), (257, 776, 385), (1024, 768, 3072), (96, 2048, 512)])
@pytest.mark.parametrize("block_n", [0, 192, 256])
@pytest.mark.parametrize("cluster", [0, 1, 2])
def test_warp_specialized_gemm_matches_float64(m, k, n, block_n, cluster):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the warp-specialized wgmma GEMM runs on sm_90 only")
    library = cuda_build.load(cuda_build.family_source(gelu_linear.__file__, "gelu_linear_hopper"))

    def gemm(case):
        out = torch.empty((m, n), dtype=case["x"].dtype, device="cuda")
        return cuda_hopper_gelu_linear(library, case["x"], case["w"], case["b"], out, block_n, cluster)

    label = f"cuda_hopper {m}x{k}->{n} block_n={block_n} cluster={cluster}"
    assert_matches_float64("gelu_linear", label, {"m": m, "k": k, "n": n}, gemm, m + n)


@pytest.mark.parametrize("cluster", [1, 2])
def test_warp_specialized_gemm_is_repeatable(cluster):
    """A stage handed back too early (a race between the pair's multicast and a consumer still
    reading) shows as calls that differ; 30 calls over a ring that wraps 8 times must agree bit for bit."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the warp-specialized wgmma GEMM runs on sm_90 only")
    family = get_family("gelu_linear")
    library = cuda_build.load(cuda_build.family_source(gelu_linear.__file__, "gelu_linear_hopper"))
    params = {"m": 1000, "k": 2560, "n": 3000}
    case = family.build_case("custom", params, "bf16", torch.device("cuda"), seed=7)
    first = cuda_hopper_gelu_linear(
        library,
        case["x"],
        case["w"],
        case["b"],
        torch.empty(1000, 3000, dtype=torch.bfloat16, device="cuda"),
        0,
        cluster,
    ).clone()
    assert check(family, "bf16", first, family.reference(case.inputs, params)).passed
    out = torch.empty_like(first)
    for _ in range(30):
        cuda_hopper_gelu_linear(library, case["x"], case["w"], case["b"], out, 0, cluster)
        assert torch.equal(out, first)


@pytest.mark.parametrize("variant", ["triton", "triton_wavefit"])
@pytest.mark.parametrize("m,k,n", [(130, 72, 200), (257, 776, 392), (1024, 768, 3072)])
def test_triton_tma_gemms_match_float64_on_the_gpu(variant, m, k, n):
    """The TMA Triton GEMMs' GPU epilogue (tanh.approx) is PTX the CPU interpreter never runs."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the TMA Triton GEMMs need sm_90")
    built = get_family("gelu_linear").variants[variant]
    params = {"m": m, "k": k, "n": n}
    assert_matches_float64("gelu_linear", f"{variant} {m}x{k}->{n}", params, lambda case: built.build(case)(), m + k)


@pytest.mark.parametrize(
    "tile",
    [
        wavefit.GemmTile(128, 192, 64, 4, 8, 8, 1, warp_specialize=True),
        wavefit.GemmTile(128, 256, 64, 4, 8, 16, 1, warp_specialize=True),
        wavefit.GemmTile(128, 256, 64, 4, 8, 16, 1),  # the 4-stage tile before round 18
        wavefit.TILES[0],  # the 8192^3 tile (3 stages since round 18)
    ],
    ids=lambda t: t.label,
)
@pytest.mark.parametrize("early_bias", [True, False], ids=["bias-before-k-loop", "bias-after"])
def test_wavefit_tiles_match_float64_on_the_gpu(tile, early_bias):
    """Tiles the rule does not pick at these shapes: warp-specialized ones (descriptors built on the
    device) and both bias placements, at ragged M, N and K."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the wave-fitted GEMM's tiles are sized for sm_90")

    def gemm(case):
        return wavefit.prepare(case["x"], case["w"], case["b"], tile=tile, early_bias=early_bias)()

    params = {"m": 1000, "k": 776, "n": 3000}
    assert_matches_float64("gelu_linear", f"triton_wavefit {tile.label} early_bias={early_bias}", params, gemm, 3)


@pytest.mark.parametrize("reverse", [True, False], ids=["odd-waves-reversed", "forward"])
def test_wavefit_waves_match_float64_on_the_gpu(reverse):
    """The 8192^3 tile over several waves (33 x 33 tiles on the GPU's programs), so odd waves walk K
    from its end, at ragged M, N and K (776: a part-filled last K step, first in a reversed wave)."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the wave-fitted GEMM's tiles are sized for sm_90")
    tile = replace(wavefit.TILES[0], reverse_odd_waves=reverse)

    def gemm(case):
        return wavefit.prepare(case["x"], case["w"], case["b"], tile=tile)()

    params = {"m": 4100, "k": 776, "n": 8200}
    assert_matches_float64("gelu_linear", f"triton_wavefit {tile.label}", params, gemm, 5)
