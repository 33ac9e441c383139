"""gelu_linear: triton implementation."""

from __future__ import annotations

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import interpreting, tl, triton
from rooflint.kernels import sm_count
from rooflint.kernels.common import autotune_picks
from rooflint.kernels.common.tile_order import (
    PERSISTENT_TILE,
    autotuned_descriptors,
    gemm_configs,
    persistent_grid,
    tile_origin,
)
from rooflint.kernels.gelu_linear import FAMILY, FLOAT_DTYPES, skinny
from rooflint.kernels.gelu_linear.skinny_pdl import SKINNY_PDL_CU
from rooflint.kernels.gelu_linear.skinny_ring import SKINNY_RING_CU
from rooflint.kernels.gelu_linear.tiles import INTERPRETER_SMS, dot_wt, gelu_store, load_bias


def _set_tma_blocks(nargs):
    # Descriptors are built before the config is chosen; each config stamps its tile shape on them.
    # Y is stored in two half-width tiles (see the epilogue), so its block is BLOCK_N / 2 wide.
    nargs["x_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_K"]]
    nargs["w_desc"].block_shape = [nargs["BLOCK_N"], nargs["BLOCK_K"]]
    nargs["y_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_N"] // 2]


def _configs():
    # The two winners of a config sweep (docs/perf-notes has it), autotuned on (M, N, K):
    # - 128x256x64, 3 stages, 8 warps, persistent, GROUP_M 16: 8192^3. 164 registers, 176.5 KiB smem
    #   (3 x 48 KB of stages + a 32 KB half-tile for the store): one block per SM. Not 4 stages:
    #   8192^3 runs at the power cap, where a stage that costs energy per call costs clock.
    # - 128x128x64, 3 stages, 8 warps, one program per tile: GPT-2's 1024x768x3072.
    #   170 registers keep it at one block per SM, so its 192 tiles run as 1.45 waves.
    winners = [(128, 256, 64, 3, 8, 16, True), (128, 128, 64, 3, 8, 8, False)]
    interpreter_tile = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "PERSISTENT": True}
    return gemm_configs(PERSISTENT_TILE, winners, _set_tma_blocks, interpreter_tile)


@triton.autotune(configs=_configs(), key=["M", "N", "K"])
@triton.jit
def _gelu_linear_kernel(
    x_desc,
    w_desc,
    y_desc,
    b_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    PERSISTENT: tl.constexpr,  # read by the launcher's grid: one program per SM, or per tile
    UPCAST: tl.constexpr,  # set exactly when the CPU interpreter runs the kernel
):
    # Each program strides over the tiles. Persistent (one program per SM), the tile loop is
    # flattened into the K loop, so the software pipeliner issues the next tile's TMA loads while
    # this tile's epilogue runs, and no block pays a launch or a cold pipeline fill.
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0), flatten=True):
        off_m, off_n = tile_origin(tile, tiles_m, tiles_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(k_tiles):
            # The TMA unit zero-fills reads past M, N or K, so edge tiles need no masks.
            a = x_desc.load([off_m, kt * BLOCK_K])
            b = w_desc.load([off_n, kt * BLOCK_K])
            acc = dot_wt(a, b, acc, UPCAST)
        # 16-bit data only (the family's dtypes): the one-MUFU GELU wherever PTX runs, i.e. not UPCAST.
        gelu_store(acc, load_bias(b_ptr, off_n, N, BLOCK_N), off_m, off_n, y_desc, BLOCK_M, BLOCK_N, True, not UPCAST)


def triton_gelu_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None):
    """One launch either way: up to 16 rows (a decode step) take the weight-streaming kernel of
    skinny.py; more take the TMA GEMM below."""
    m, k = x.shape
    n = w.shape[0]
    if m <= skinny.MAX_ROWS:
        return skinny.skinny_linear(x, w, b, gelu=True, out=out)
    # TMA descriptors need 16-byte aligned row strides.
    assert k % 8 == 0 and n % 8 == 0, "gelu_linear's Triton kernel needs K and N multiples of 8"
    x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
    out = torch.empty((m, n), dtype=x.dtype, device=x.device) if out is None else out
    x_desc, w_desc, y_desc = autotuned_descriptors(x, w, out)
    sms = sm_count(x.device, INTERPRETER_SMS)

    grid = persistent_grid(m, n, sms)

    autotune_picks.launch(_gelu_linear_kernel, grid, x.device, x_desc, w_desc, y_desc, b, m, n, k,
                          UPCAST=interpreting())  # fmt: skip
    return out


# skinny_pdl.cu: at <= 16 rows on a GPU with PDL, skinny_linear hands the GEMM to its CUDA kernel.
@FAMILY.variant(
    "triton",
    needs=(NEEDS_CUDA, NEEDS_TRITON),
    dtypes=FLOAT_DTYPES,
    sources=(SKINNY_PDL_CU, SKINNY_RING_CU),
)
def triton_variant(case):
    """TMA GEMM over a flattened tile loop, bias + GELU epilogue by TMA, autotuned; <= 16 rows: weight streaming"""
    x, w, b = case["x"], case["w"], case["b"]
    if x.shape[1] % 8 or w.shape[0] % 8:
        raise VariantSkipped("TMA needs 16-byte row strides: K and N multiples of 8")
    out = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
    return lambda: triton_gelu_linear(x, w, b, out)
