"""The split tail of the Gluon attention's grid (kernels/attention/gluon_tail.py): which tiles the plan
splits and into what key ranges, and the merge kernel (Triton, run by the interpreter on CPU tensors)
against float64 attention. The Gluon kernel that writes the partials runs only on an sm_90 GPU: the
GPU tier checks the two together (tests/gpu/test_gpu_attention_gluon.py)."""

from __future__ import annotations

import math

import pytest
import torch

from rooflint.kernels.attention import gluon_tail as tail

LOG2E = 1.4426950408889634


def ranges(p: tail.TailPlan, key_tiles: int) -> list[range]:
    """The key tiles each range of a split tile covers, as the kernel computes them."""
    return [
        range(s * p.split_tiles, s * p.split_tiles + min(p.split_tiles, key_tiles - s * p.split_tiles))
        for s in range(p.splits)
    ]


def test_the_bench_shape_splits_its_four_leftover_tiles_over_the_idle_sms():
    # B=4, H=32, N=4096 at 128x128 tiles on 132 SMs: 4,096 tiles, 31 waves and 4 over.
    p = tail.plan(4096, 32, 132, causal=False)
    assert (p.tail, p.regular) == (4, 4092)
    assert p.splits * p.tail <= 132 and p.splits >= 2
    assert p.split_tiles >= tail.MIN_SPLIT_TILES
    assert p.grid == 4092 + p.units


@pytest.mark.parametrize("tiles,key_tiles,sms", [(4096, 32, 132), (42, 7, 132), (3, 128, 132), (140, 9, 132),
                                                 (5, 4, 16), (7, 31, 16)])  # fmt: skip
def test_every_key_tile_is_in_exactly_one_nonempty_range(tiles, key_tiles, sms):
    p = tail.plan(tiles, key_tiles, sms, causal=False)
    assert p.tail, p
    covered = [t for r in ranges(p, key_tiles) for t in r]
    assert covered == list(range(key_tiles))
    assert all(len(r) >= 1 for r in ranges(p, key_tiles))
    assert p.units <= sms  # the split tiles fit in the SMs the partial wave leaves idle (or one wave)


@pytest.mark.parametrize(
    "tiles,key_tiles,sms,causal,why",
    [
        (4096, 32, 132, True, "causal tiles differ in length; the last wave holds the shortest"),
        (264, 32, 132, False, "whole waves"),
        (132 + 100, 32, 132, False, "the partial wave fills more than half the SMs"),
        (4, 3, 132, False, "too few key tiles for two ranges of two"),
    ],
)
def test_no_split_where_it_cannot_help(tiles, key_tiles, sms, causal, why):
    p = tail.plan(tiles, key_tiles, sms, causal)
    assert (p.tail, p.grid, p.regular) == (0, tiles, tiles), why


def partial_state(q, k, v, keys: range, scale: float):
    """What a range's CTA writes: unnormalized O over its keys, the rows' max m (base 2, scaled) and sum l."""
    s = (q @ k[keys.start : keys.stop].T) * scale * LOG2E
    m = s.max(dim=-1).values
    p = torch.exp2(s - m[:, None])
    return p @ v[keys.start : keys.stop], m, p.sum(dim=-1)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", [200, 333])
def test_merge_matches_float64_attention(head_dim, dtype, n):
    torch.manual_seed(n + head_dim)
    b, h, block_m, block_n = 1, 3, 128, 64
    q, k, v = (torch.randn(b, h, n, head_dim, dtype=torch.float64) for _ in range(3))
    num_m, key_tiles = math.ceil(n / block_m), math.ceil(n / block_n)
    p = tail.plan(num_m * b * h, key_tiles, sms=4, causal=False)  # a small "GPU": a tail to split
    assert p.tail and p.splits >= 2, p
    part_o, part_ml = tail.partials(p, block_m, head_dim, "cpu")
    part_o.fill_(float("nan"))  # every row the merge reads is written below
    part_ml.fill_(float("nan"))
    for t in range(p.tail):
        tile = p.regular + t
        head, first = divmod(tile, num_m)
        rows = range(first * block_m, min(first * block_m + block_m, n))
        qh, kh, vh = q[0, head], k[0, head], v[0, head]
        for s, keys in enumerate(ranges(p, key_tiles)):
            keys = range(keys.start * block_n, min(keys.stop * block_n, n))
            o, m, l_sum = partial_state(qh[rows.start : rows.stop], kh, vh, keys, head_dim**-0.5)
            unit_row = (t * p.splits + s) * block_m
            part_o[unit_row : unit_row + len(rows)] = o.float()
            part_ml[0, unit_row : unit_row + len(rows)] = m.float()
            part_ml[1, unit_row : unit_row + len(rows)] = l_sum.float()
            # Rows past N hold what the kernel computes there (the next head's rows): never stored.
            part_o[unit_row + len(rows) : unit_row + block_m] = 0.0
            part_ml[0, unit_row + len(rows) : unit_row + block_m] = float("-inf")
            part_ml[1, unit_row + len(rows) : unit_row + block_m] = 0.0
    out = torch.full((b, h, n, head_dim), 7.0, dtype=dtype)
    tail.merge(p, part_o, part_ml, out, n, block_m)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    for t in range(p.tail):
        head, first = divmod(p.regular + t, num_m)
        rows = slice(first * block_m, min(first * block_m + block_m, n))
        got = out[0, head, rows].double()
        tolerance = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
        assert torch.allclose(got, expected[0, head, rows], atol=tolerance, rtol=tolerance), (t, p)
    # The regular tiles' rows are the Gluon kernel's to write: the merge leaves them alone.
    for tile in range(p.regular):
        head, first = divmod(tile, num_m)
        assert torch.all(out[0, head, first * block_m : min(first * block_m + block_m, n)] == 7.0)
