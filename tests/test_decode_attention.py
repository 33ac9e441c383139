import math

import pytest
import torch
from kernel_checks import assert_variant_matches_reference

from rooflint.core.family import Cost
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.decode_attention import plans
from rooflint.kernels.decode_attention.plans import (
    DecodeWorkspace,
    cache_layout,
    kv_layout,
    q_layout,
    split_plan,
    wave_plan,
)
from rooflint.kernels.decode_attention.triton import (
    PAGE,
    paged_copy,
    preload_plan,
    preload_tiles,
    triton_decode,
    triton_paged_decode,
)

# (b, h, h_kv, c, d): a one-token cache; GQA with G=2 over 3 splits (300 tokens, 128 per split);
# G=8 (one kv head) over 5 splits; G=3 (padded to 16 query rows) with a 77-token single split;
# G=4 with 203 tokens (not a multiple of the 16-token page nor of the 64-key tile).
SHAPES = [(1, 1, 1, 1, 16), (2, 4, 2, 300, 64), (1, 8, 1, 517, 32), (3, 6, 2, 77, 128), (2, 8, 2, 203, 64)]


def params_of(b, h, h_kv, c, d):
    return {"b": b, "h": h, "h_kv": h_kv, "c": c, "d": d}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_triton_decode_matches_reference(shape, dtype):
    assert_variant_matches_reference("decode_attention", "triton", params_of(*shape), dtype)


@pytest.mark.parametrize("variant", ["eager", "eager_unfused"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_eager_variants_match_reference(variant, dtype):
    assert_variant_matches_reference("decode_attention", variant, params_of(2, 8, 2, 50, 32), dtype)


@pytest.mark.parametrize("variant", ["compile_unfused", "compile_builtin", "sdpa_math"])
@pytest.mark.parametrize("h_kv", [8, 2])  # multi-head and GQA
def test_compiled_and_math_backend_rows_match_reference(variant, h_kv):
    assert_variant_matches_reference("decode_attention", variant, params_of(2, 8, h_kv, 50, 32), "bf16")


def test_every_sdpa_backend_is_its_own_eager_row_after_the_baseline():
    family = get_family("decode_attention")
    assert family.ordered_variants()[0] is family.baseline is family.variants["eager"]
    eager_rows = {v.name for v in family.variants.values() if v.kind == "eager"}
    assert eager_rows == {"eager", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math"}
    assert {v.name for v in family.variants.values() if v.kind == "compile"} == {"compile_unfused", "compile_builtin"}


def test_fp32_is_not_offered():
    assert get_family("decode_attention").dtypes == ("fp16", "bf16")


def test_reference_one_token_returns_its_value_and_equal_keys_average():
    family = get_family("decode_attention")
    params = params_of(1, 2, 1, 1, 4)
    inputs = family.make_inputs(params, torch.float16, torch.device("cpu"), torch.Generator().manual_seed(0))
    got = family.reference(inputs, params)
    # A single cached token gets all the weight, for both query heads sharing the kv head.
    assert torch.equal(got[0, 0, 0], inputs["v"][0, 0, 0].double())
    assert torch.equal(got[0, 1, 0], inputs["v"][0, 0, 0].double())
    # Identical keys give uniform weights: the output is the mean of the values.
    params = params_of(1, 1, 1, 5, 4)
    inputs = family.make_inputs(params, torch.float16, torch.device("cpu"), torch.Generator().manual_seed(1))
    inputs["k"][:] = inputs["k"][:, :, :1]
    got = family.reference(inputs, params)
    assert torch.allclose(got[0, 0, 0], inputs["v"][0, 0].double().mean(dim=0))


@pytest.mark.parametrize(
    "b,h_kv,c", [(32, 32, 8192), (1, 8, 8192), (2, 2, 300), (4, 1, 1), (1, 1, 129), (64, 16, 128), (64, 16, 129)]
)
def test_split_plan_covers_the_cache_with_nonempty_splits(b, h_kv, c):
    splits, chunk = split_plan(b, h_kv, c, sms=132)
    assert chunk % 64 == 0
    assert (splits - 1) * chunk < c <= splits * chunk  # the last split holds at least one token
    if b * h_kv >= 4 * 132 and c > 128:
        assert splits == 2  # enough programs already, but two shorter ones each balance the last wave
    if c <= 128:
        assert splits == 1  # no split shorter than MIN_SPLIT_TOKENS
    if (b, h_kv, c) == (1, 8, 8192):
        assert splits == 64  # 8 kv heads alone would leave 124 of 132 SMs idle


@pytest.mark.parametrize(
    "b,h_kv,c,slots", [(32, 8, 8192, 396), (32, 32, 8192, 528), (1, 8, 8192, 396), (2, 2, 300, 528), (4, 1, 1, 8)]
)
def test_wave_plan_fills_the_waves_of_resident_blocks(b, h_kv, c, slots):
    splits, chunk = wave_plan(b, h_kv, c, slots)
    assert chunk % 64 == 0
    assert (splits - 1) * chunk < c <= splits * chunk  # the last split holds at least one token
    heads = b * h_kv

    def fill(s):
        return heads * s / (math.ceil(heads * s / slots) * slots)

    # Every split count a plan can have once chunks are whole 64-token blocks, up to 4 waves' worth
    # (a split per 128 tokens at most).
    possible = {
        math.ceil(c / (math.ceil(math.ceil(c / s) / 64) * 64))
        for s in range(1, min(math.ceil(c / 128), 4 * math.ceil(slots / heads)) + 1)
    }
    assert all(fill(splits) >= fill(s) - 0.02 for s in possible)
    if (b, h_kv, c, slots) == (32, 8, 8192, 396):
        assert splits == 3  # 768 blocks, 1.94 waves of 396; one split would leave 140 slots idle
    if (b, h_kv, c, slots) == (32, 32, 8192, 528):
        assert splits == 1  # 1024 heads already fill 1.94 waves


def test_cost_reads_the_cache_once_per_kv_head():
    # b=2, h=4, h_kv=2, c=10, d=8 in bf16: FLOPs 4*2*4*10*8 = 2560; bytes q 2*4*8*2 = 128,
    # K and V 2*(2*2*10*8)*2 = 1280, o 128.
    family = get_family("decode_attention")
    params = params_of(2, 4, 2, 10, 8)
    assert family.cost(params, "bf16") == Cost(tensor_flops=2560, bytes=1536)
    # The unfused chain adds 4 passes over the 2*4*10 bf16 scores: 640 bytes.
    assert family.variants["eager_unfused"].modeled_bytes(params, "bf16") == 2176


def test_large_preset_is_the_peer_shape_and_exceeds_l2():
    family = get_family("decode_attention")
    large = family.sizes["large"]
    assert large[0] == params_of(32, 32, 32, 8192, 128)
    assert all(family.cost(p, "bf16").bytes > 4 * 50e6 for p in large)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_triton_paged_decode_matches_reference(shape, dtype):
    # The pages are scattered by a random permutation: reading them in order would fail the check.
    assert_variant_matches_reference("decode_attention", "triton_paged", params_of(*shape), dtype)


def test_paged_copy_scatters_pages_and_the_table_gathers_them_back():
    k = torch.randn(2, 3, 37, 16)
    v = torch.randn(2, 3, 37, 16)
    k_pool, v_pool, table = paged_copy(k, v, torch.Generator().manual_seed(0))
    assert k_pool.shape == (2 * 3 * 3, PAGE, 1, 16) and table.shape == (6, 3) and table.dtype == torch.int32
    assert not torch.equal(table.view(-1).long(), torch.arange(18))  # scattered, not in order
    gathered = k_pool[table.long()].reshape(2, 3, 3 * PAGE, 16)[:, :, :37]
    assert torch.equal(gathered, k) and torch.equal(v_pool[table.long()].reshape(2, 3, 48, 16)[:, :, :37], v)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_triton_decode_reads_a_qkv_view_and_a_cache_prefix_in_place(dtype):
    """The model's layout: q a view of the fused QKV rows [B, 3, H, D], K and V the first `length`
    rows of a preallocated [B, H_kv, capacity, D] cache. Neither is copied, and the result is exact."""
    b, h, d, capacity, length = 3, 4, 32, 80, 45
    gen = torch.Generator().manual_seed(3)
    qkv = torch.randn(b, 3, h, d, generator=gen).to(dtype)
    k_cache = torch.randn(b, h, capacity, d, generator=gen).to(dtype)
    v_cache = torch.randn(b, h, capacity, d, generator=gen).to(dtype)
    q, k, v = qkv[:, 0].unsqueeze(2), k_cache[:, :, :length], v_cache[:, :, :length]
    assert q_layout(q)[0] is q and q_layout(q)[1] == 3 * h * d
    assert kv_layout(k)[0] is k and kv_layout(k)[1] == capacity
    ws = DecodeWorkspace(q, h, length)
    got = triton_decode(q, k, v, ws).double()
    inputs = {"q": q.contiguous(), "k": k.contiguous(), "v": v.contiguous()}
    want = get_family("decode_attention").reference(inputs, params_of(b, h, h, length, d))
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5}[dtype]
    assert torch.allclose(got, want, atol=tol, rtol=tol)


def test_layouts_that_are_not_dense_rows_are_copied():
    k = torch.randn(2, 4, 30, 16).transpose(1, 2)  # heads and tokens swapped: not a cache prefix
    copied, rows = kv_layout(k)
    assert copied is not k and copied.is_contiguous() and rows == k.shape[2]
    q = torch.randn(2, 16, 4, 1).permute(0, 2, 3, 1)  # D not the innermost stride
    assert q_layout(q)[0] is not q


def test_k_and_v_of_different_layouts_are_both_made_dense():
    # The kernels take one row count for K and V: a prefix view of one beside a dense other is copied.
    cache = torch.randn(2, 3, 40, 16)
    k, v = cache[:, :, :25], torch.randn(2, 3, 25, 16)
    k_out, v_out, rows = cache_layout(k, v)
    assert rows == 25 and k_out.is_contiguous() and v_out.is_contiguous() and torch.equal(k_out, k)
    k_out, v_out, rows = cache_layout(k, cache[:, :, :25])  # both prefixes of the same capacity: kept
    assert rows == 40 and k_out is k


def decode_case(b, h, h_kv, c, d, dtype, seed=0):
    family = get_family("decode_attention")
    params = params_of(b, h, h_kv, c, d)
    inputs = family.make_inputs(params, dtype, torch.device("cpu"), torch.Generator().manual_seed(seed))
    return inputs, family.reference(inputs, params)


@pytest.mark.parametrize("shape", [(1, 2, 2, 517, 32), (1, 8, 2, 300, 16), (4, 4, 1, 1000, 16), (1, 8, 1, 130, 16)])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_paged_and_dense_decode_walk_many_tiles_per_split(monkeypatch, shape, dtype):
    """With one SM the plan gives few, long splits: several 64-key tiles per program, each tile's
    block-table entries read a tile ahead, the last tile of a split partial (517 = 320 + 197 tokens
    over G=1; 300 over G=4; 1000 in one split over G=4; 130 = 128 + 2 over G=8)."""
    monkeypatch.setattr(plans, "sm_count", lambda device, on_cpu: 1)  # DecodeWorkspace plans by it
    b, h, h_kv, c, d = shape
    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    inputs, want = decode_case(*shape, torch_dtype)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    ws = DecodeWorkspace(q, h_kv, c)
    assert ws.chunk > 64  # several tiles per program
    k_pool, v_pool, table = paged_copy(k, v, torch.Generator().manual_seed(1))
    family = get_family("decode_attention")
    for got in (triton_decode(q, k, v, ws).clone(), triton_paged_decode(q, k_pool, v_pool, table, h_kv, c, ws)):
        verdict = check(family, dtype, got, want)
        assert verdict.passed, verdict.message


@pytest.mark.parametrize("h_kv", [4, 1])  # the model's multi-head layout, and G=4 over one kv head
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_triton_paged_decode_reads_a_qkv_view_and_the_first_length_tokens(h_kv, dtype):
    """The GPT-2 decode step's call: q a view of the fused QKV rows [B, 3, H, D], the pools paged
    for the cache's capacity, of which the first `length` tokens (not a whole number of pages) are read."""
    b, h, d, capacity, length = 3, 4, 32, 80, 45
    gen = torch.Generator().manual_seed(4)
    qkv = torch.randn(b, 3, h, d, generator=gen).to(dtype)
    k_cache = torch.randn(b, h_kv, capacity, d, generator=gen).to(dtype)
    v_cache = torch.randn(b, h_kv, capacity, d, generator=gen).to(dtype)
    k_pool, v_pool, table = paged_copy(k_cache, v_cache, gen)
    q = qkv[:, 0].unsqueeze(2)
    assert q_layout(q)[0] is q  # read in place, 3 * h * d elements between sequences
    got = triton_paged_decode(q, k_pool, v_pool, table, h_kv, length, DecodeWorkspace(q, h_kv, length)).double()
    inputs = {"q": q.contiguous(), "k": k_cache[:, :, :length], "v": v_cache[:, :, :length]}
    want = get_family("decode_attention").reference(inputs, params_of(b, h, h_kv, length, d))
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    assert torch.allclose(got, want, atol=tol, rtol=tol)


@pytest.mark.parametrize("chunk,block_n,d,tiles", [(128, 64, 64, 2), (128, 32, 64, 4), (128, 64, 128, 0),
                                                   (100, 64, 64, 0), (256, 64, 64, 0), (64, 64, 32, 1)])  # fmt: skip
def test_a_chunk_is_loaded_before_the_wait_only_where_its_registers_allow(chunk, block_n, d, tiles):
    assert preload_tiles(chunk, block_n, d) == tiles


# The SHAPES in both dtypes and both key tiles, and GPT-2's decode (H = 12, D = 64) at context 576
# (5 splits of two 64-key tiles) as the model runs it: bf16, 64-key tiles. Its fp16 twin takes the
# same path for 30 s more of the interpreter; in 16-key tiles it takes the path of the D = 64 SHAPES
# (128-key chunks of 8 preloaded tiles; 5 splits as in the D = 32 one) for 40 s more. One sequence:
# split_plan gives 12 heads the same 5 splits as 24 (the 128-token minimum caps both), and a second
# sequence would only repeat every program (the SHAPES cover B > 1).
@pytest.mark.parametrize(
    "shape, dtype, block_n",
    [(shape, dtype, block_n) for block_n in (64, 16) for shape in SHAPES for dtype in ("fp16", "bf16")]
    + [((1, 12, 12, 576, 64), "bf16", 64)],
)
def test_decode_with_its_chunk_loaded_before_the_wait_matches_reference(shape, dtype, block_n):
    """Under PDL a program loads its chunk's K and V, all but the newest row, before it waits for
    the QKV kernel, then reads the newest row: the same attention, dense and paged."""
    b, h, h_kv, c, d = shape
    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    inputs, want = decode_case(*shape, torch_dtype)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    ws = DecodeWorkspace(q, h_kv, c)
    tiles = preload_tiles(ws.chunk, block_n, d)
    assert tiles > 0 or d == 128  # every shape but D = 128 takes the preloaded path
    if c == 576:  # GPT-2's: the plan its decode runs at B = 2 too
        assert (ws.splits, ws.chunk, tiles) == (5, 128, 2) == (*split_plan(2, h_kv, c, 132), tiles)
    k_pool, v_pool, table = paged_copy(k, v, torch.Generator().manual_seed(2))
    family = get_family("decode_attention")
    dense = triton_decode(q, k, v, ws, block_n=block_n, preload=True).clone()
    paged = triton_paged_decode(q, k_pool, v_pool, table, h_kv, c, ws, block_n=block_n, preload=True)
    for got in (dense, paged):
        verdict = check(family, dtype, got, want)
        assert verdict.passed, verdict.message


@pytest.mark.parametrize(
    "b, h_kv, c, d, plan, tiles",
    [
        (1, 8, 576, 128, (9, 64), 1),  # the 8B's step: 9 splits of 64 keys, each loaded before the wait
        (8, 8, 576, 128, (9, 64), 1),
        (1, 8, 576, 64, (5, 128), 2),  # D = 64: 128 keys already fit, split_plan's plan (GPT-2's, the 1B's)
        (1, 8, 32768, 128, (64, 512), 0),  # a long cache: 512-key chunks, as split_plan gives
        (1, 8, 576, 256, (5, 128), 0),  # no whole key block fits at D = 256: split_plan's plan
    ],
)
def test_preload_plan_shortens_chunks_only_to_what_the_registers_hold(b, h_kv, c, d, plan, tiles):
    got = preload_plan(b, h_kv, c, d, sms=132)
    assert got == plan
    assert preload_tiles(got[1], 64, d) == tiles
    if d != 128 or c > 4096:
        assert got == split_plan(b, h_kv, c, 132)
    splits, chunk = got
    assert (splits - 1) * chunk < c <= splits * chunk  # every split holds keys


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_decode_at_d128_with_one_preloaded_tile_a_chunk_matches_reference(dtype):
    """D = 128 on preload_plan's 64-key chunks (the Llama 8B's plan): one tile a program in registers
    before the wait, the newest row read after it, dense and paged; 203 keys end in a partial chunk."""
    b, h, h_kv, c, d = 1, 8, 2, 203, 128
    inputs, want = decode_case(b, h, h_kv, c, d, {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype])
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    ws = DecodeWorkspace(q, h_kv, c, plan=preload_plan(b, h_kv, c, d, sms=132))
    assert (ws.splits, ws.chunk, preload_tiles(ws.chunk, 64, d)) == (4, 64, 1)
    k_pool, v_pool, table = paged_copy(k, v, torch.Generator().manual_seed(3))
    family = get_family("decode_attention")
    dense = triton_decode(q, k, v, ws, preload=True).clone()
    paged = triton_paged_decode(q, k_pool, v_pool, table, h_kv, c, ws, preload=True)
    for got in (dense, paged):
        verdict = check(family, dtype, got, want)
        assert verdict.passed, verdict.message
