"""The order a persistent GEMM walks its output tiles in (gelu_linear's and scaled_gemm's Triton kernels)."""

from __future__ import annotations

from rooflint.core.triton_compat import tl, triton


@triton.jit
def tile_origin(tile, tiles_m, tiles_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    # Grouped order: consecutive tiles sweep GROUP_M tile rows per W panel, so the panel is
    # re-read from L2 rather than HBM.
    width = GROUP_M * tiles_n
    first_m = (tile // width) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    return (first_m + (tile % width) % rows) * BLOCK_M, ((tile % width) // rows) * BLOCK_N
