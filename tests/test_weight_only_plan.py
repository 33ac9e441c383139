"""weight_only_gemm's plan() at the decode shapes the H200 sweep measured (docs/perf-notes/quantized.md,
"At the reference"): it takes the sweep's best tile where that tile is one of its own."""

from __future__ import annotations

from unittest.mock import patch

import pytest

from rooflint.kernels.weight_only_gemm import triton as stream

H200_SMS = 132  # and the H100 SXM's


def _plan(m, k, n):
    with patch.object(stream, "interpreting", lambda: False):  # the GPU's rules, not the interpreter's tile
        return stream.plan(n, k, m, 0, H200_SMS)


@pytest.mark.parametrize("m", [1, 16])
def test_long_rows_over_narrow_n_take_the_64_row_tile_split_deep(m):
    # Llama-1B's down projection (8192 -> 2048): the 64-row tile in 8 K splits measured 1.39x
    # (m=1) and 1.34x (m=16) over bf16_skinny, where the 16- and 32-row tiles gave 1.17x and 1.20x.
    tile, splits = _plan(m, 8192, 2048)
    assert (tile.block_n, splits) == (64, 8)


@pytest.mark.parametrize("m", [1, 8])
def test_a_grid_wide_enough_for_every_sm_stays_unsplit(m):
    # Llama-1B's up projection (2048 -> 8192): unsplit was the best entry; 32-row tiles give
    # 256 programs without a split, where the 64-row tile's 128 would need one.
    tile, splits = _plan(m, 2048, 8192)
    assert (tile.block_n, splits) == (32, 1)


def test_short_rows_over_narrow_n_keep_the_narrow_tile():
    # 2048 -> 2048: K = 2048 allows only 2 splits, too few for the 64-row tile's 32 tiles to fill
    # 132 SMs; the 16-row tile split in 2 does (measured 1.05x; the best, 32x128, is not a plan() tile).
    tile, splits = _plan(1, 2048, 2048)
    assert (tile.block_n, splits) == (16, 2)
