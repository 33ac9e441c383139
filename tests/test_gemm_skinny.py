"""The decode GEMM (kernels/_gemm_skinny.py) against float64, in Triton's CPU interpreter."""

import pytest
import torch
import torch.nn.functional as F

from rooflint.kernels import _gemm_skinny
from rooflint.kernels._gemm_skinny import TILES, SkinnyTile, choose_tile, skinny_linear

TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5}


def expected(x, w, b, gelu, residual):
    z = F.linear(x.double(), w.double(), None if b is None else b.double())
    if gelu:
        z = F.gelu(z, approximate="tanh")
    return z if residual is None else z + residual.double()


# (m, k, n): one row; GPT-2's 8 decode rows with a K tail (72 % 32) and an N tail (100 % 16);
# the 16-row limit with several whole K steps; odd everything.
@pytest.mark.parametrize("m,k,n", [(1, 32, 16), (8, 72, 100), (16, 128, 48), (5, 37, 23)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("gelu,bias,residual", [(False, True, False), (True, True, False), (False, True, True),
                                                (False, False, False)])  # fmt: skip
def test_matches_float64(m, k, n, dtype, gelu, bias, residual):
    gen = torch.Generator().manual_seed(m * 1000 + k + n)
    x = torch.randn(m, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) * k**-0.5).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype) if bias else None
    r = torch.randn(m, n, generator=gen).to(dtype) if residual else None
    got = skinny_linear(x, w, b, gelu=gelu, residual=r)
    want = expected(x, w, b, gelu, r)
    assert got.shape == (m, n) and got.dtype == dtype
    assert torch.allclose(got.double(), want, atol=TOL[dtype], rtol=TOL[dtype]), (got.double() - want).abs().max()


def test_reads_strided_rows_and_writes_into_the_residual_in_place():
    # A row view of a wider buffer (a decode step's last positions), and out aliasing the residual
    # (x += linear(a) in place): each output element reads its residual before it is written.
    gen = torch.Generator().manual_seed(7)
    wide = torch.randn(8, 96, generator=gen)
    x = wide[:, 16:80]
    assert x.stride(0) == 96
    w, b = torch.randn(40, 64, generator=gen), torch.randn(40, generator=gen)
    stream = torch.randn(8, 40, generator=gen)
    want = expected(x, w, b, False, stream)
    got = skinny_linear(x, w, b, residual=stream, out=stream)
    assert got.data_ptr() == stream.data_ptr()
    assert torch.allclose(stream.double(), want, atol=1e-5, rtol=1e-5)


def test_more_than_sixteen_rows_is_refused():
    with pytest.raises(ValueError, match="at most 16 rows"):
        skinny_linear(torch.zeros(17, 32), torch.zeros(16, 32))


@pytest.mark.parametrize("n,sms,block_n", [(3072, 132, 16), (2304, 132, 16), (768, 132, 16), (50304, 132, 64),
                                           (8192, 132, 32), (4096, 64, 64), (3072, 80, 32)])  # fmt: skip
def test_tile_gives_every_sm_a_program_where_n_allows(n, sms, block_n):
    tile = choose_tile(n, sms)
    assert tile.block_n == block_n
    if tile is not TILES[-1]:
        assert -(-n // tile.block_n) >= sms


def test_explicit_tile_is_used():
    x, w = torch.randn(4, 64), torch.randn(32, 64)
    got = skinny_linear(x, w, tile=SkinnyTile(16, 64, 1, 4))
    assert torch.allclose(got.double(), x.double() @ w.double().T, atol=1e-5)
    assert _gemm_skinny.MAX_ROWS == 16
