"""The last, partial wave of a non-causal attention grid, split along the keys (`triton_gluon`).

Why. The Gluon attention gives each CTA 128 query rows of one head, one CTA per SM. At
`bench attention --size large` (B=4, H=32, N=4096, D=128) that is 4,096 equal tiles on 132 SMs:
31 full waves and 4 tiles over. Those 4 run alone while 128 SMs idle, for a whole tile's time,
about 1/32 of the kernel. The same holds for any grid whose tile count is not a multiple of the SM
count, and for every grid smaller than one wave.

What. The tiles of the partial wave (`TailPlan.tail`) are split along the keys into `splits`
ranges of `split_tiles` key tiles each, one CTA a range, so they spread over the idle SMs. Each
range's CTA writes its unnormalized O (fp32) and its rows' running max m and sum l (the online
softmax's state, base 2); `merge` then combines a tile's ranges as FlashDecoding does:
O = sum_s 2^(m_s - M) O_s / sum_s 2^(m_s - M) l_s with M = max_s m_s. Under the causal mask the
tiles differ in length and are launched longest first, so the last wave holds the shortest: no split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rooflint.core.triton_compat import tl, triton  # stand-ins where triton is missing

# A range of fewer key tiles leaves the CTA's two-stage K/V ring nothing to overlap, and its fixed
# cost (Q's load, the fp32 partial's store) near its work.
MIN_SPLIT_TILES = 2
MERGE_ROWS = 32  # query rows a merge program combines


@dataclass(frozen=True)
class TailPlan:
    """How a grid of `tiles` CTAs runs: the first `regular` whole, the rest (`tail`) in key ranges."""

    tiles: int
    tail: int  # tiles split along the keys (0: none)
    splits: int  # key ranges a split tile has
    split_tiles: int  # key tiles a range holds (the last range may hold fewer)

    @property
    def regular(self) -> int:
        return self.tiles - self.tail

    @property
    def units(self) -> int:
        """CTAs the split tiles take, one a key range."""
        return self.tail * self.splits

    @property
    def grid(self) -> int:
        return self.regular + self.units


def plan(tiles: int, key_tiles: int, sms: int, causal: bool) -> TailPlan:
    """Split the partial wave's tiles into as many key ranges as the SMs they leave idle can take,
    each at least MIN_SPLIT_TILES key tiles long; no split when the tiles fill their waves, when
    the partial wave fills more than half the SMs, under the causal mask, or with too few key tiles."""
    tail = tiles % sms  # a grid smaller than one wave is all tail
    whole = TailPlan(tiles, 0, 1, key_tiles)
    if causal or tail == 0:
        return whole
    splits = min(key_tiles // MIN_SPLIT_TILES, sms // tail)
    if splits < 2:
        return whole
    split_tiles = math.ceil(key_tiles / splits)
    return TailPlan(tiles, tail, math.ceil(key_tiles / split_tiles), split_tiles)


@triton.jit
def _merge_ranges(part_o, part_ml, out, n, ml_stride, num_m, regular, splits, BLOCK_M: tl.constexpr,
                  D: tl.constexpr, ROWS: tl.constexpr):  # fmt: skip
    """One split tile's ROWS query rows: its key ranges' partial O, m and l combined into O."""
    t = tl.program_id(0)  # which split tile
    rows = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
    dims = tl.arange(0, D)
    first_unit = t * splits
    m_max = tl.full([ROWS], float("-inf"), tl.float32)
    for s in range(splits):
        m_max = tl.maximum(m_max, tl.load(part_ml + (first_unit + s) * BLOCK_M + rows))
    total = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, D], tl.float32)
    for s in range(splits):
        unit_rows = (first_unit + s) * BLOCK_M + rows
        weight = tl.exp2(tl.load(part_ml + unit_rows) - m_max)  # read m (row 0 of part_ml)
        total += weight * tl.load(part_ml + ml_stride + unit_rows)  # read l (row 1 of part_ml)
        acc += weight[:, None] * tl.load(part_o + unit_rows[:, None] * D + dims[None, :])  # read O_s
    tile = regular + t
    q_rows = (tile % num_m) * BLOCK_M + rows
    head_rows = (tile // num_m).to(tl.int64) * n + q_rows
    result = acc / total[:, None]
    tl.store(
        out + head_rows[:, None] * D + dims[None, :], result.to(out.dtype.element_ty), mask=(q_rows < n)[:, None]
    )  # fmt: skip  write O


def partials(tail_plan: TailPlan, block_m: int, head_dim: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The split CTAs' outputs: O [units * block_m, D] and m, l as the rows of [2, units * block_m],
    fp32. One element each when nothing is split (the kernel's pointers must still be valid)."""
    rows = max(tail_plan.units * block_m, 1)
    o = torch.empty(rows, head_dim if tail_plan.units else 1, device=device)
    return o, torch.empty(2, rows, device=device)


def merge(tail_plan: TailPlan, part_o: torch.Tensor, part_ml: torch.Tensor, out: torch.Tensor, n: int,
          block_m: int) -> None:  # fmt: skip
    """Write O of every split tile into `out` ([B, H, N, D]) from its ranges' partials."""
    head_dim = out.shape[-1]
    grid = (tail_plan.tail, block_m // MERGE_ROWS)
    _merge_ranges[grid](
        part_o, part_ml, out, n, part_ml.shape[1], math.ceil(n / block_m), tail_plan.regular, tail_plan.splits,
        block_m, head_dim, MERGE_ROWS,
    )  # fmt: skip
