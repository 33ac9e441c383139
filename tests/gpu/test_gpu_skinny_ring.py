"""GPU tier: the decode GEMM that streams W through a shared-memory ring by bulk copies
(gelu_linear/skinny_ring.cu), against float64: plain projections with bias and residual, and the SwiGLU
epilogue, over tiles whole in one block and tiles shared by several, odd N and M, fp16 and bf16, under PDL,
repeated and replayed from a CUDA graph (the shared tiles' counts must come back to zero)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import assert_swiglu_matches_float64, projection_inputs

from rooflint.kernels.gelu_linear import skinny, skinny_ring

pytestmark = pytest.mark.gpu

TOL = {torch.float16: 3e-3, torch.bfloat16: 2e-2}


@pytest.fixture(autouse=True)
def sm90():
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("skinny_ring.cu needs sm_90 (bulk copies, mbarriers)")


def tiles_split(m: int, k: int, n: int, ffn: int = 0) -> tuple[int, int]:
    """(tiles some blocks share, tiles one block has whole) of this launch's partition."""
    tiles = skinny_ring.tiles_of(n, ffn)
    chunks = k // skinny_ring.plan(m, k, skinny_ring.device_shared(torch.device("cuda")))[0]
    grid = min(torch.cuda.get_device_properties(0).multi_processor_count, tiles * chunks)
    counts = skinny_ring.contributors(tiles, chunks, grid)
    return sum(c > 1 for c in counts), sum(c == 1 for c in counts)


# (m, k, n): Llama-3.1-8B's down (K = 14336, 256 tiles on the SMs: most shared by two blocks) and o_proj
# at B=1, Llama-3.2-1B's down and gate/up at B=8; N not a multiple of 16 (a tile's last rows past N); few
# tiles, each split over many blocks (K = 14336, N = 40); one chunk of K; M of 1, 3, 5, 8.
SHAPES = [(1, 14336, 4096), (1, 4096, 4096), (8, 8192, 2048), (8, 2048, 16384), (3, 4096, 1000), (5, 14336, 40),
          (1, 512, 7), (8, 1536, 2600), (2, 4096, 6144)]  # fmt: skip


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_linear_bias_residual_match_float64(m, k, n, dtype):
    x, w, b, r = projection_inputs(m, k, n, dtype)
    for bias, residual, pdl in ((None, None, False), (b, None, True), (b, r, True), (None, r, False)):
        for _ in range(2):  # again: the shared tiles' counts came back to zero
            got = skinny_ring.linear(x, w, bias, residual, pdl=pdl)
            want = F.linear(x.double(), w.double(), None if bias is None else bias.double())
            want = want + residual.double() if residual is not None else want
            err = (got.double() - want).abs().max().item()
            assert err <= TOL[dtype] * (1 + want.abs().max().item()), (bias is not None, residual is not None, err)


def test_the_shapes_cover_shared_and_whole_tiles():
    """The shapes above reach both kinds of tile, so both finishing paths are checked."""
    shared = whole = 0
    for m, k, n in SHAPES:
        s, w = tiles_split(m, k, n)
        shared, whole = shared + s, whole + w
    assert shared > 0 and whole > 0
    assert tiles_split(5, 14336, 40)[1] == 0  # 3 tiles over 132 blocks: every tile shared by many


# (m, k, ffn): Llama-3.1-8B's gate/up at B=1 (1,792 tiles of 8 gate and 8 up rows), Llama-3.2-1B's at B=8,
# ffn not a multiple of 8, and a few tiles each split over many blocks.
SWIGLU_SHAPES = [(1, 4096, 14336), (8, 2048, 8192), (3, 1024, 1000), (5, 4096, 20), (1, 512, 9)]


@pytest.mark.parametrize("m,k,ffn", SWIGLU_SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_swiglu_epilogue_matches_float64(m, k, ffn, dtype):
    """silu(gate) * up, gate and up rounded to the dtype first, as the unfused GEMM's output is."""
    runs = ((False, False), (True, True), (True, False))  # (with bias, pdl)
    assert_swiglu_matches_float64(lambda x, w, bias, pdl: skinny_ring.swiglu(x, w, bias, pdl=pdl), m, k, ffn, dtype,
                                  TOL[dtype], runs)  # fmt: skip


def test_results_do_not_depend_on_timing():
    """Shared tiles are summed in block order: twenty launches give the same bits."""
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(1, 14336, device="cuda", generator=gen).to(torch.bfloat16)
    w = (torch.randn(4096, 14336, device="cuda", generator=gen) * 0.01).to(torch.bfloat16)
    first = skinny_ring.linear(x, w)
    for _ in range(20):
        assert torch.equal(skinny_ring.linear(x, w), first)


def test_in_a_pdl_chain_and_a_graph_it_reads_the_new_x():
    """Under PDL after a kernel that writes x, replayed from a CUDA graph with new inputs: each replay reads
    that replay's x (the wait holds) and its residual, and the counts reset between replays."""
    from rooflint.kernels.common.pdl import decode_chain

    gen = torch.Generator(device="cuda").manual_seed(9)
    source = torch.randn(1, 14336, device="cuda", generator=gen).to(torch.bfloat16)
    x = torch.empty_like(source)
    w = (torch.randn(4096, 14336, device="cuda", generator=gen) * 0.01).to(torch.bfloat16)
    r = torch.randn(1, 4096, device="cuda", generator=gen).to(torch.bfloat16)
    out = torch.empty(1, 4096, device="cuda", dtype=torch.bfloat16)
    scale = torch.ones((), device="cuda")

    def step():
        torch.mul(source, scale, out=x)  # the write the ring kernel must wait for
        skinny_ring.linear(x, w, None, r, out, pdl=True)

    with decode_chain():
        step()  # the workspace is made before the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
    for value in (2.0, -1.0, 0.5):
        scale.fill_(value)
        graph.replay()
        want = F.linear((source.double() * value).to(torch.bfloat16).double(), w.double()) + r.double()
        err = (out.double() - want).abs().max().item()
        assert err <= TOL[torch.bfloat16] * (1 + want.abs().max().item()), (value, err)


def test_skinny_linear_takes_it_where_the_switch_asks(monkeypatch):
    """ROOFLINT_RING=1 sends a decode GEMM it fits (plain, PDL on) to the ring kernel; a folded norm or a
    GELU stays on the held kernel."""
    calls = []
    ring = skinny_ring.linear_where_it_fits
    spy = lambda *a, **kw: calls.append(a[0].shape) or ring(*a, **kw)  # noqa: E731
    monkeypatch.setattr(skinny_ring, "linear_where_it_fits", spy)
    monkeypatch.setenv("ROOFLINT_RING", "1")
    monkeypatch.setenv("ROOFLINT_PDL", "1")
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16) * 0.02
    got = skinny.skinny_linear(x, w)
    assert calls == [x.shape]
    skinny.skinny_linear(x, w, gelu=True)
    assert len(calls) == 1
    assert torch.allclose(got.double(), x.double() @ w.double().T, atol=0.05, rtol=2e-2)
    monkeypatch.setenv("ROOFLINT_RING", "0")
    skinny.skinny_linear(x, w)
    assert len(calls) == 1


def test_refusals_name_what_is_wrong():
    x = torch.randn(9, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="1 to 8 rows"):
        skinny_ring.linear(x, w)
    with pytest.raises(ValueError, match="multiple of 512"):
        skinny_ring.linear(x[:1, :1000], w[:, :1000].contiguous())
    with pytest.raises(ValueError, match="does not fit"):
        big = torch.randn(8, 16384, device="cuda", dtype=torch.bfloat16)
        skinny_ring.linear(big, torch.randn(16, 16384, device="cuda", dtype=torch.bfloat16))
