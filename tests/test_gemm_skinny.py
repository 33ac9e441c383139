"""The decode GEMM (kernels/gelu_linear/skinny.py) against float64, in Triton's CPU interpreter."""

import pytest
import torch
import torch.nn.functional as F

from rooflint.kernels.gelu_linear import skinny
from rooflint.kernels.gelu_linear.skinny import (
    TILES,
    KVAppend,
    SkinnyTile,
    choose_tile,
    fold_layer_norm,
    skinny_linear,
    skinny_norm_linear,
)

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


@pytest.mark.parametrize("n,sms,block_n", [(3072, 132, 32), (2304, 132, 32), (768, 132, 16), (50304, 132, 32),
                                           (1024, 132, 16), (4096, 64, 32), (2048, 132, 16),
                                           (2112, 132, 32)])  # fmt: skip
def test_tile_gives_every_other_sm_a_program_where_n_allows(n, sms, block_n):
    tile = choose_tile(n, sms)
    assert tile.block_n == block_n
    if tile is not TILES[-1]:
        assert 2 * -(-n // tile.block_n) >= sms


def test_explicit_tile_is_used():
    x, w = torch.randn(4, 64), torch.randn(32, 64)
    got = skinny_linear(x, w, tile=SkinnyTile(16, 64, 1, 4))
    assert torch.allclose(got.double(), x.double() @ w.double().T, atol=1e-5)
    assert skinny.MAX_ROWS == 16


def layer_norm64(x, g, beta, eps):
    x = x.double()
    return F.layer_norm(x, (x.shape[-1],), g.double(), beta.double(), eps)


# The folded layer norm, including a row whose mean is far above its spread (the shifted one-pass
# statistics must not cancel), K tails, several K steps and the 16-row limit.
@pytest.mark.parametrize("m,k,n", [(8, 72, 100), (3, 64, 48), (16, 96, 40), (5, 37, 23), (1, 128, 16)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_folded_layer_norm_matches_float64(m, k, n, dtype):
    gen = torch.Generator().manual_seed(m + k + n)
    x = torch.randn(m, k, generator=gen)
    x[0] = x[0] * 0.1 + 300.0  # large mean, small spread
    x = x.to(dtype)
    g, beta = (1 + 0.3 * torch.randn(k, generator=gen)).to(dtype), torch.randn(k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) * k**-0.5).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype)
    got = skinny_norm_linear(x, fold_layer_norm(g, beta, w, b), 1e-5, gelu=True)
    want = expected(layer_norm64(x, g, beta, 1e-5), w, b, True, None)
    # W diag(gamma) and x - shift are each rounded to the dtype once, as an unfused LN's output is
    tol = TOL[dtype] * 3
    assert torch.allclose(got.double(), want, atol=tol, rtol=tol), (got.double() - want).abs().max()


@pytest.mark.parametrize("splits", [2, 3, 4])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_split_k_sums_every_partial_once_and_resets_its_counters(splits, dtype):
    gen = torch.Generator().manual_seed(splits)
    x = torch.randn(8, 160, generator=gen).to(dtype)
    w = (torch.randn(72, 160, generator=gen) * 0.1).to(dtype)
    b, stream = torch.randn(72, generator=gen).to(dtype), torch.randn(8, 72, generator=gen).to(dtype)
    want = expected(x, w, b, False, stream)
    for _ in range(2):  # the second call reuses the workspace: its counters must be back at zero
        got = skinny_linear(x, w, b, residual=stream, splits=splits)
        assert torch.allclose(got.double(), want, atol=TOL[dtype] * 2, rtol=TOL[dtype] * 2)
    for _part, count in skinny._SplitWorkspace._cache.values():
        assert int(count.abs().sum()) == 0


def test_split_k_result_does_not_depend_on_the_split_count_beyond_rounding():
    x, w = torch.randn(4, 256), torch.randn(32, 256)
    one = skinny_linear(x, w, splits=1)
    for splits in (2, 4, 8):
        assert torch.allclose(skinny_linear(x, w, splits=splits), one, atol=1e-4)


@pytest.mark.parametrize("heads,head_dim,kv_heads", [(4, 16, 4), (4, 16, 2), (3, 8, 1)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_kv_append_scatters_k_and_v_columns_into_their_slots(heads, head_dim, kv_heads, dtype):
    # A QKV projection's output row m is [q (heads*D) | k (kv_heads*D) | v (kv_heads*D)]; the K and V
    # of (row m, kv head h) land in slot slots[m * kv_heads + h] of the pools, nothing else changes.
    m, k = 5, 48
    n = (heads + 2 * kv_heads) * head_dim
    gen = torch.Generator().manual_seed(heads * 10 + kv_heads)
    x = torch.randn(m, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) * 0.2).to(dtype)
    g, beta = torch.rand(k, generator=gen).to(dtype) + 0.5, torch.randn(k, generator=gen).to(dtype)
    pool_slots = 64
    k_pool = torch.full((pool_slots, head_dim), float("nan"), dtype=dtype)
    v_pool = torch.full((pool_slots, head_dim), float("nan"), dtype=dtype)
    slots = torch.randperm(pool_slots, generator=gen)[: m * kv_heads].to(torch.int64)
    append = KVAppend(k_pool, v_pool, slots, heads * head_dim, kv_heads, head_dim)
    y = skinny_norm_linear(x, fold_layer_norm(g, beta, w, None), 1e-5, append=append)
    width = kv_heads * head_dim
    k_new = y[:, heads * head_dim : heads * head_dim + width].reshape(m * kv_heads, head_dim)
    v_new = y[:, heads * head_dim + width :].reshape(m * kv_heads, head_dim)
    assert torch.equal(k_pool[slots], k_new) and torch.equal(v_pool[slots], v_new)
    untouched = torch.ones(pool_slots, dtype=torch.bool)
    untouched[slots] = False
    assert torch.isnan(k_pool[untouched]).all() and torch.isnan(v_pool[untouched]).all()


def test_choose_splits_cuts_long_rows_of_a_narrow_projection():
    tile = choose_tile(768, 132)
    assert (tile.block_n, skinny.choose_splits(768, 3072, tile, 132)) == (16, 4)  # 48 tiles x 4 of 768
    assert skinny.choose_splits(768, 768, tile, 132) == 1  # rows of 768: a split costs more than it brings
    assert skinny.choose_splits(768, 256, tile, 132) == 1  # one K step: nothing to split
    assert skinny.choose_splits(768, 8192, tile, 132) == skinny.MAX_SPLITS
    assert skinny.choose_splits(8192, 3072, choose_tile(8192, 132), 132) == 1  # 256 tiles: enough programs


@pytest.mark.parametrize(
    "k,m,steps",
    [(768, 8, 12), (3072, 8, 12), (1024, 8, 16), (4096, 8, 16), (1280, 8, 16), (1600, 8, 10), (768, 16, 6),
     (1024, 12, 8), (5120, 8, 0), (6400, 8, 0), (1616, 8, 0), (64, 8, 0), (192, 8, 0)],
)  # fmt: skip
def test_the_cuda_decode_gemm_splits_k_over_whole_warps(k, m, steps):
    from rooflint.kernels.gelu_linear import skinny_pdl

    assert skinny_pdl.steps_for(k, m) == steps
    if steps:
        warps = k // (16 * steps)
        assert k == 16 * steps * warps and (4 if m <= 8 else 8) <= warps <= skinny_pdl.MAX_WARPS
        assert m <= 8 or steps <= 8  # two X tiles only with the shorter shares


@pytest.mark.parametrize(
    "k,m,steps",
    [(2048, 8, 8), (2048, 1, 8), (1024, 8, 8), (768, 8, 8), (512, 8, 8), (896, 8, 8), (1616, 8, 0), (4096, 8, 0),
     (3072, 8, 0), (2048, 16, 0), (1024, 16, 4), (512, 9, 4), (256, 8, 4)],
)  # fmt: skip
def test_swiglus_two_w_tiles_take_half_the_k_a_warp(k, m, steps):
    """Llama-3.2-1B's gate/up (K = 2048) fits 16 warps of 8 steps at <= 8 rows; the 8B's K = 4096 does not."""
    from rooflint.kernels.gelu_linear import skinny_pdl

    assert skinny_pdl.steps_for(k, m, swiglu=True) == steps
    if steps:
        warps = k // (16 * steps)
        assert k == 16 * steps * warps and (4 if m <= 8 else 8) <= warps <= skinny_pdl.MAX_WARPS
        assert steps <= (8 if m <= 8 else 4)  # twice the W registers of the plain kernel's shares


def test_swiglu_names_what_it_cannot_take_in_one_line():
    from rooflint.kernels.gelu_linear import skinny_pdl

    w = torch.zeros(64, 2048, dtype=torch.bfloat16)
    assert "needs a CUDA GPU" in skinny_pdl.why_not_swiglu(8, w)  # this machine has none
    assert "fp16 or bf16" in skinny_pdl.why_not_swiglu(8, w.float())
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        skinny_pdl.swiglu(torch.zeros(8, 2048, dtype=torch.bfloat16), w)


def test_the_fused_epilogues_refuse_an_x_of_another_k_dtype_or_alignment():
    from rooflint.kernels.gelu_linear import skinny_pdl

    w = torch.zeros(64, 2048, dtype=torch.bfloat16)
    assert skinny_pdl._why_not_x("SwiGLU kernel", torch.zeros(8, 2048, dtype=torch.bfloat16), w) is None
    shorter = skinny_pdl._why_not_x("SwiGLU kernel", torch.zeros(8, 1024, dtype=torch.bfloat16), w)
    assert shorter == "x [8, 1024] torch.bfloat16 does not match the weight [64, 2048] torch.bfloat16"
    assert "does not match" in skinny_pdl._why_not_x("RoPE epilogue", torch.zeros(8, 2048, dtype=torch.float16), w)
    odd = torch.zeros(8, 2050, dtype=torch.bfloat16)[:, :2048]  # rows 2050 apart: not 16-byte aligned
    unaligned = skinny_pdl._why_not_x("RoPE epilogue", odd, w)
    assert unaligned == "skinny_pdl.cu's RoPE epilogue needs 16-byte aligned x rows"


@pytest.mark.parametrize(
    "k,m,steps",
    [(768, 8, 6), (2048, 8, 16), (3072, 8, 12), (8192, 8, 16), (8192, 16, 8), (14336, 1, 16), (5120, 12, 8),
     (18944, 5, 4), (1616, 8, 0), (4864, 8, 0), (256, 8, 0)],
)  # fmt: skip
def test_the_streamed_kernel_takes_the_longest_chunk_that_divides_k(k, m, steps):
    from rooflint.kernels.gelu_linear import skinny_pdl

    assert skinny_pdl.stream_steps(k, m) == steps
    if steps:
        assert k % (16 * steps * skinny_pdl.STREAM_WARPS) == 0
        assert m <= 8 or steps <= 8  # two X tiles only with the shorter shares


@pytest.mark.parametrize(
    "k,m,planned",
    [(768, 8, (12, False)), (2048, 8, (16, False)), (4096, 8, (16, False)), (4096, 16, (8, True)),
     (8192, 8, (16, True)), (8192, 16, (8, True)), (14336, 1, (16, True)), (1280, 8, (16, False)),
     (1616, 8, None), (4864, 8, None)],
)  # fmt: skip
def test_plan_holds_what_the_held_kernel_takes_and_streams_longer_rows(k, m, planned):
    from rooflint.kernels.gelu_linear import skinny_pdl

    assert skinny_pdl.plan(k, m) == (None if planned is None else skinny_pdl.Plan(*planned))


def test_the_cuda_decode_gemm_takes_only_what_it_can_load():
    from rooflint.kernels.gelu_linear import skinny_pdl

    x, w = torch.zeros(8, 768, dtype=torch.bfloat16), torch.zeros(64, 768, dtype=torch.bfloat16)
    assert skinny_pdl.fits(x, w, None, torch.zeros(8, 64, dtype=torch.bfloat16))
    assert not skinny_pdl.fits(x.float(), w.float(), None, torch.zeros(8, 64))  # fp32: no MMA for it
    wide = torch.zeros(8, 771, dtype=torch.bfloat16)[:, :768]  # rows 771 apart: not 16-byte aligned
    assert not skinny_pdl.fits(wide, w, None, torch.zeros(8, 64, dtype=torch.bfloat16))
    assert not skinny_pdl.fits(torch.zeros(8, 1616, dtype=torch.bfloat16), torch.zeros(64, 1616, dtype=torch.bfloat16),
                                None, torch.zeros(8, 64, dtype=torch.bfloat16))  # fmt: skip
    long_x, long_w = torch.zeros(8, 8192, dtype=torch.bfloat16), torch.zeros(64, 8192, dtype=torch.bfloat16)
    assert skinny_pdl.fits(long_x, long_w, None, torch.zeros(8, 64, dtype=torch.bfloat16))  # streamed


def test_a_forced_kernel_is_its_own_split_or_refused_naming_the_other():
    from rooflint.kernels.gelu_linear import skinny_pdl

    assert skinny_pdl.forced(2048, 8, True) == skinny_pdl.Plan(16, True)  # streamed where plan holds
    assert skinny_pdl.forced(2048, 8, False) == skinny_pdl.Plan(16, False)
    with pytest.raises(ValueError, match="held CUDA kernel splits no K = 8192 at M = 8; the streamed"):
        skinny_pdl.forced(8192, 8, False)
    with pytest.raises(ValueError, match="streamed CUDA kernel splits no K = 256"):
        skinny_pdl.forced(256, 8, True)


@pytest.mark.parametrize(
    "k,m,steps",
    [(4096, 1, 16), (4096, 8, 16), (2048, 8, 16), (3072, 8, 16), (2304, 8, 16), (1024, 8, 0), (8192, 1, 0),
     (4096, 9, 0), (2080, 8, 0), (6144, 1, 0)],
)  # fmt: skip
def test_the_shared_tile_takes_k_2048_to_4096_at_up_to_8_rows(k, m, steps):
    """The held kernel's second tile in shared memory: 16 rows x K within 128 KB, one X tile, and 8-16
    warps so a block has a thread for each of its 2 x 16 x 8 outputs."""
    from rooflint.kernels.gelu_linear import skinny_pdl

    assert skinny_pdl.shared_steps(k, m) == steps
    if steps:
        warps = k // (16 * steps)
        assert k == 16 * steps * warps and 8 <= warps <= skinny_pdl.MAX_WARPS and 16 * k * 2 <= 128 * 1024


def test_the_shared_tile_is_taken_only_where_its_blocks_cover_most_sms():
    """Llama-3.1-8B's o_proj (4096 rows: 128 paired blocks) and QKV (6144: 192) on 132 SMs take it;
    Llama-3.2-1B's QKV (3072: 96) and o_proj (2048: 64) do not: they would stream from fewer SMs."""
    from rooflint.kernels.gelu_linear import skinny_pdl

    cpu = torch.device("cpu")  # sm_count's stand-in: 132 SMs, an H100's or an H200's
    assert skinny_pdl.shared_pays(4096, 1, 4096 // 32, cpu) and skinny_pdl.shared_pays(4096, 1, 6144 // 32, cpu)
    assert not skinny_pdl.shared_pays(2048, 8, 3072 // 32, cpu) and not skinny_pdl.shared_pays(2048, 8, 64, cpu)
    assert skinny_pdl.shared_pays(2048, 8, 119, cpu) and not skinny_pdl.shared_pays(2048, 8, 118, cpu)
    assert not skinny_pdl.shared_pays(1024, 8, 4096, cpu)  # K below the tile's range


def test_large_projections_pass_the_c_entry_the_shared_tile(monkeypatch):
    """launch pairs two row blocks a block, qkv_rope too, and swiglu holds the up rows in shared memory,
    each at the shared tile's steps, where the blocks cover the SMs; a forced kernel never takes it."""
    import re

    from rooflint.kernels.gelu_linear import skinny_pdl

    calls = []

    class Library:
        def launch(self, function, *args):
            calls.append(args)

    monkeypatch.setattr(skinny_pdl.cuda_build, "load", lambda source: Library())
    monkeypatch.setattr(skinny_pdl, "why_not_swiglu", lambda m, w: None)
    monkeypatch.setattr(skinny_pdl, "why_not_rope", lambda m, w, width, d: None)
    source = skinny_pdl.SKINNY_PDL_CU.read_text()
    declared = re.search(r'extern "C" int rooflint_skinny_pdl\((.*?)\)\s*\{', source, re.S).group(1)
    names = [part.split()[-1].lstrip("*") for part in declared.split(",")]
    x, w = torch.zeros(1, 4096, dtype=torch.bfloat16), torch.zeros(4096, 4096, dtype=torch.bfloat16)
    cos, sin = torch.zeros(8, 128, dtype=torch.bfloat16), torch.zeros(8, 128, dtype=torch.bfloat16)
    out = torch.zeros(1, 4096, dtype=torch.bfloat16)
    skinny_pdl.launch(x, w, None, False, None, out, None, None)
    skinny_pdl.launch(x, w, None, False, None, out, None, None, streamed=False)
    skinny_pdl.swiglu(x, w)
    skinny_pdl.qkv_rope(x, w, None, cos, sin, 5, 1, 3072, 128)
    linear, forced, swiglu, rope = (dict(zip(names, args)) for args in calls)
    assert (linear["shared"], linear["steps"], forced["shared"], forced["steps"]) == (1, 16, 0, 16)
    assert (swiglu["shared"], swiglu["steps"], swiglu["ffn"]) == (1, 16, 2048)
    assert (rope["shared"], rope["steps"], rope["rope_width"]) == (1, 16, 3072)


def test_every_entry_passes_the_c_entry_its_arguments_by_its_declared_names(monkeypatch):
    """launch, swiglu and qkv_rope all go through one call into rooflint_skinny_pdl: as many arguments
    as skinny_pdl.cu declares (the stream is the launcher's), each where its name says."""
    import re

    from rooflint.kernels.gelu_linear import skinny_pdl

    calls = []

    class Library:
        def launch(self, function, *args):
            calls.append(args)

    monkeypatch.setattr(skinny_pdl.cuda_build, "load", lambda source: Library())
    monkeypatch.setattr(skinny_pdl, "why_not_swiglu", lambda m, w: None)  # a CPU: the checks would refuse
    monkeypatch.setattr(skinny_pdl, "why_not_rope", lambda m, w, width, d: None)
    source = skinny_pdl.SKINNY_PDL_CU.read_text()
    declared = re.search(r'extern "C" int rooflint_skinny_pdl\((.*?)\)\s*\{', source, re.S).group(1)
    names = [part.split()[-1].lstrip("*") for part in declared.split(",")]
    assert names[-1] == "stream"
    x, w = torch.zeros(8, 2048, dtype=torch.bfloat16), torch.zeros(96, 2048, dtype=torch.bfloat16)
    cos, sin = torch.zeros(8, 16, dtype=torch.bfloat16), torch.zeros(8, 16, dtype=torch.bfloat16)
    skinny_pdl.launch(x, w, None, True, None, torch.zeros(8, 96, dtype=torch.bfloat16), None, None, streamed=False)
    skinny_pdl.swiglu(x, w)
    skinny_pdl.qkv_rope(x, w, None, cos, sin, 5, 1, 64, 16, pdl=True)
    assert [len(args) for args in calls] == [len(names) - 1] * 3
    linear, swiglu, rope = (dict(zip(names, args)) for args in calls)
    assert (linear["n"], linear["gelu"], linear["pdl"], linear["streamed"], linear["ffn"]) == (96, 1, 1, 0, 0)
    assert (linear["steps"], linear["rope_width"], linear["cos"], linear["shared"]) == (16, 0, None, 0)
    assert swiglu["shared"] == 0 and rope["shared"] == 0  # 3 and 6 row blocks: too few blocks for the tile
    assert (swiglu["n"], swiglu["ffn"], swiglu["steps"], swiglu["pdl"]) == (
        48,
        48,
        skinny_pdl.steps_for(2048, 8, True),
        0,
    )
    assert rope["cos"] is cos and rope["sin"] is sin and rope["steps"] == skinny_pdl.rope_steps(2048, 8)
    assert (rope["n"], rope["rope_width"], rope["rope_dim"], rope["rope_start"], rope["rope_tokens"]) == (
        96,
        64,
        16,
        5,
        1,
    )
    assert (rope["pdl"], rope["ffn"], rope["gelu"], rope["residual"]) == (1, 0, 0, None)
