"""Paths of the Triton kernels that no other CPU test held against float64 (the audit of the rule
"every Triton kernel is checked against float64 in the interpreter, over odd shapes and every dtype
it takes"): the launches that only these shapes or launch choices reach, each in every dtype the
kernel's family declares, in Triton's CPU interpreter (tests/conftest.py sets TRITON_INTERPRET=1).

Each test computes its reference in float64 with torch ops of its own (or the family's float64
reference) and compares norm-wise (rooflint.engine.correctness.relative_error). Tolerances are the
project's: one rounding of the output to the dtype plus fp32 accumulation, about 4 units of
roundoff: fp16 (u = 2^-11) 2e-3, bf16 (u = 2^-8) 1.6e-2, fp32 1e-5 (the summation order only).
"""

from __future__ import annotations

import math

import pytest
import torch

from rooflint.core.registry import get_family
from rooflint.engine import ceiling_kernels
from rooflint.engine.correctness import check, relative_error

CPU = torch.device("cpu")
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
TOL = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}


def _family_case(family_name: str, params: dict, dtype: str, seed: int = 0):
    family = get_family(family_name)
    return family, family.build_case("custom", params, dtype, CPU, seed=seed)


def _assert_family_check(family, dtype, output, reference, label=""):
    verdict = check(family, dtype, output, reference)
    assert verdict.passed, f"{family.name} {dtype} {label}: {verdict.message}"


# ------------------------------------------------------------------------------------- reduce_sum


# Several rows, each split over several programs: the per-row partials and arrival counters of the
# last-program-done combine (test_reduce_sum's multi-row shapes all run one split a row). 5001 and
# 3001 over 1024-wide tiles: 5 and 3 splits (not powers of two), the last tile ragged.
@pytest.mark.parametrize("rows,cols", [(3, 5001), (5, 3001)])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_reduce_sum_several_rows_each_split_over_programs(rows, cols, dtype):
    from rooflint.kernels.reduce_sum.triton import RowSum

    family, case = _family_case("reduce_sum", {"rows": rows, "cols": cols}, dtype, seed=rows)
    row_sum = RowSum(case["x"], block=1024)
    assert row_sum.splits > 1 and rows > 1
    expected = case["x"].double().sum(dim=-1)
    for _ in range(2):  # the second call finds its counters re-armed by the first call's last arrivals
        out = row_sum()
        # fp32 accumulation whatever the input dtype: the family's 1e-4 (reduce_sum's tolerances)
        assert relative_error(out, expected) <= family.tolerances[dtype]
    assert int(row_sum.counts.abs().sum()) == 0


# ---------------------------------------------------------------------------------------- softmax


# Rows of several programs with the last one ragged (test_softmax's rows fit one program): 37 x 37
# takes 32-row programs (2, the second 5 rows), 37 x 130 takes 8-row ones (5, the last 5 rows).
@pytest.mark.parametrize("rows,cols", [(37, 37), (37, 130)])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_softmax_row_tiles_of_several_programs_with_a_ragged_last_one(rows, cols, dtype):
    from rooflint.kernels.softmax.triton import triton_softmax

    _, case = _family_case("softmax", {"rows": rows, "cols": cols}, dtype, seed=cols)
    x = case["x"]
    out = torch.full_like(x, float("nan"))  # a row left unwritten stays NaN: relative_error is inf
    triton_softmax(x, out)
    assert relative_error(out, torch.softmax(x.double(), dim=-1)) <= TOL[dtype]


# --------------------------------------------------------------------------------------- kv_cache


# A row of 15 elements in blocks of 4: four column programs per row, the last 3 wide (the family's
# tests run one column block per row). A copy is exact: tolerance 0 (kv_cache's tolerances).
@pytest.mark.parametrize("op", ["append", "read"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_kv_copy_over_several_column_blocks_with_a_ragged_last_one(op, dtype):
    from rooflint.kernels.kv_cache import _dims, _operands
    from rooflint.kernels.kv_cache.triton import triton_kv_copy

    params = {"op": op, "num_blocks": 11, "seqs": 3, "pages_per_seq": 3, "heads": 3, "head_dim": 5}
    family, case = _family_case("kv_cache", params, dtype, seed=5)
    _, _, tokens, row = _dims(params)
    k_src, v_src, k_dst, v_dst, index, result = _operands(case)
    triton_kv_copy(k_src, v_src, k_dst, v_dst, index, tokens, row, op == "append", block=4, num_warps=1)
    assert family.tolerances[dtype] == 0.0
    _assert_family_check(family, dtype, result, family.reference(case.inputs, params), op)


# ------------------------------------------------------------------------------------------- rope


# Heads in tiles of 2 (tile=8 over half a head of 3, padded to 4): three head programs a token,
# the last one ragged (the family's shapes fit all heads in one program).
@pytest.mark.parametrize("fused", [False, True], ids=["table", "fused"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_rope_head_tiles_of_several_programs_with_a_ragged_last_one(fused, dtype):
    from rooflint.kernels.rope.triton import triton_rope

    params = {"batch": 2, "seq": 7, "heads": 5, "head_dim": 6}
    family, case = _family_case("rope", params, dtype, seed=2)
    q, k = case["q"], case["k"]
    q_out, k_out = torch.full_like(q, float("nan")), torch.full_like(k, float("nan"))
    out = triton_rope(q, k, case["cos"], case["sin"], q_out, k_out, fused, tile=8, num_warps=1)
    _assert_family_check(family, dtype, out, family.reference(case.inputs, params))


# ------------------------------------------------------------------------------------ rope_append


def _rope_tables64(positions: int, head_dim: int):
    inv = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    freqs = torch.arange(positions, dtype=torch.float64)[:, None] * inv[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)  # the [positions, D] layout the models pass
    return torch.cos(angles), torch.sin(angles)


# (batch, tokens, heads, kv_heads, head_dim, start): 6 rotated heads padded to 8 (two masked), 15
# rows at positions 4..8; GQA 4 + 2 heads of 8. The kernel had only an fp32 test against the eager
# fp32 ops: here float64, in every dtype a Llama model runs in, the tables in the model's dtype.
@pytest.mark.parametrize("shape", [(3, 5, 5, 1, 16, 4), (2, 3, 4, 2, 8, 0)], ids=["h5-kv1-d16", "h4-kv2-d8"])
@pytest.mark.parametrize("append", [False, True], ids=["in-place", "append"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_rope_append_rotates_q_and_k_as_float64_does_and_appends_k_and_v(shape, append, dtype):
    from rooflint.models.ops.rope_append import rope_append

    batch, tokens, heads, kv_heads, d, start = shape
    torch_dtype = DTYPES[dtype]
    gen = torch.Generator().manual_seed(sum(shape))
    rows, half = batch * tokens, d // 2
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * d, generator=gen).to(torch_dtype)
    cos64, sin64 = _rope_tables64(start + tokens + 3, d)
    cos, sin = cos64.to(torch_dtype), sin64.to(torch_dtype)
    before = qkv.clone()
    pool_slots = 4 * rows * kv_heads
    slots = torch.randperm(pool_slots, generator=gen)[: rows * kv_heads]
    k_pool = torch.full((pool_slots, d), float("nan"), dtype=torch_dtype)
    v_pool = torch.full((pool_slots, d), float("nan"), dtype=torch_dtype)
    rope_append(qkv, cos, sin, tokens, start, heads, kv_heads, d, (slots, k_pool, v_pool) if append else None)

    # float64 rotate-half of the q and K heads, from the tables' own values
    x = before.double().view(rows, heads + 2 * kv_heads, d)
    position = start + torch.arange(rows) % tokens
    c, s = cos.double()[position][:, None, :half], sin.double()[position][:, None, :half]
    x1, x2 = x[:, : heads + kv_heads, :half], x[:, : heads + kv_heads, half:]
    expected = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
    got = qkv.view(rows, heads + 2 * kv_heads, d)
    assert relative_error(got[:, : heads + kv_heads], expected) <= TOL[dtype]
    assert torch.equal(got[:, heads + kv_heads :], before.view_as(got)[:, heads + kv_heads :])  # V untouched
    if append:
        written = torch.zeros(pool_slots, dtype=torch.bool)
        written[slots] = True
        k_rows = got[:, heads : heads + kv_heads].reshape(rows * kv_heads, d)
        v_rows = got[:, heads + kv_heads :].reshape(rows * kv_heads, d)
        assert torch.equal(k_pool[slots], k_rows) and torch.equal(v_pool[slots], v_rows)
        assert k_pool[~written].isnan().all() and v_pool[~written].isnan().all()


# -------------------------------------------------------------------------- attention, grouped KV


# Grouped-query attention (the Llama prefill's launch, group = H / H_kv): before, only an fp32
# 16 x 16 causal case against fp32 SDPA. Here 3 query heads a KV head, a ragged N (37 over 16-row
# tiles), both masks, both 16-bit dtypes, against the family's float64 reference on K and V
# repeated per query head.
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_triton_attention_with_grouped_kv_heads_matches_float64(causal, dtype):
    from rooflint.kernels.attention.triton import triton_attention

    b, h, h_kv, n, d = 2, 6, 2, 37, 64
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(b, h, n, d, generator=gen).to(DTYPES[dtype])
    k, v = (torch.randn(b, h_kv, n, d, generator=gen).to(DTYPES[dtype]) for _ in range(2))
    out = torch.full_like(q, float("nan"))
    triton_attention(q, k, v, causal, out, group=h // h_kv)
    family = get_family("attention")
    group = h // h_kv
    inputs = {"q": q, "k": k.repeat_interleave(group, dim=1), "v": v.repeat_interleave(group, dim=1)}
    expected = family.reference(inputs, {"B": b, "H": h, "N": n, "D": d, "causal": causal})
    _assert_family_check(family, dtype, out, expected, f"GQA causal={causal}")
    # The grouping matters: each query head reading its own-index KV head would be far off.
    assert relative_error(out, family.reference({"q": q, "k": k.repeat(1, group, 1, 1),
                                                 "v": v.repeat(1, group, 1, 1)}, {"causal": causal})) > 0.1  # fmt: skip


# ----------------------------------------------------------------- attention, the GPU's tile shapes


def _one_config(monkeypatch, kernel, pre_hook=None, **meta):
    """Launch an autotuned kernel with this one config (the interpreter's list has one small tile)."""
    from rooflint.core.triton_compat import triton

    monkeypatch.setattr(kernel, "configs", [triton.Config(meta, num_warps=4, num_stages=1, pre_hook=pre_hook)])


# Under the interpreter the attention kernel runs 16 x 16 tiles only, while every GPU config has
# query tiles 1, 2 or 4 key tiles tall: the causal diagonal then spans several key tiles, the one
# case whose masking the 16 x 16 tile never runs. Scaled down here: 32 x 16 and 64 x 16.
@pytest.mark.parametrize("block_m,block_n", [(32, 16), (64, 16)])
@pytest.mark.parametrize("n", [37, 100])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_triton_attention_with_query_tiles_taller_than_key_tiles_matches_float64(
    monkeypatch, block_m, block_n, n, causal, dtype
):
    from rooflint.kernels.attention import triton as attention_triton

    _one_config(monkeypatch, attention_triton._attn_fwd_kernel, BLOCK_M=block_m, BLOCK_N=block_n)
    params = {"B": 1, "H": 2, "N": n, "D": 64, "causal": causal}
    family, case = _family_case("attention", params, dtype, seed=n)
    out = attention_triton.triton_attention(case["q"], case["k"], case["v"], causal)
    _assert_family_check(family, dtype, out, family.reference(case.inputs, params), f"{block_m}x{block_n}")


def test_every_gpu_attention_config_is_causal_safe(monkeypatch):
    # The causal split (unmasked tiles below start_m * BLOCK_M, masked ones up to the diagonal) is
    # right only where BLOCK_M is a multiple of BLOCK_N: a 16 x 32 tile's unmasked loop runs its last
    # key tile past the diagonal unmasked (float64 error 0.24 at N = 37 in the interpreter).
    from rooflint.kernels.attention import triton as attention_triton

    monkeypatch.setattr(attention_triton, "interpreting", lambda: False)
    configs = attention_triton._autotune_configs()
    assert len(configs) > 1
    for config in configs:
        assert config.kwargs["BLOCK_M"] % config.kwargs["BLOCK_N"] == 0, config


# ------------------------------------------------------------------------------- scaled_gemm blocks


# Per-block scales in the two code formats test_scaled_gemm_blocks leaves out: int8 (the int32 dot
# of each K step converted before its scales) and e5m2 x e4m3. 272 = 2 x 128 + 16 and 144 = 128 + 16:
# K and N tails of the 128-wide scale blocks and of the interpreter's 32-wide tiles; M = 37 ragged.
@pytest.mark.parametrize("dtype", ["int8", "fp8_e5m2"])
def test_scaled_gemm_block_scales_in_int8_and_e5m2_match_float64(dtype):
    from rooflint.kernels.scaled_gemm.triton import scaled_gemm

    family, case = _family_case("scaled_gemm", {"m": 37, "k": 272, "n": 144, "scaling": "block"}, dtype, seed=9)
    out = scaled_gemm(case["a"], case["b"], case["sa"], case["sb"], blocks=True)
    assert out.dtype == torch.bfloat16 and out.shape == (37, 144)
    # The bf16 output's tolerance (quantization error is the format's, not the kernel's).
    _assert_family_check(family, dtype, out, family.reference(case.inputs, case.params), "block")


# The GPU's K steps of the scaled GEMM, 128 (= SCALE_BLOCK: one block scale a step) and 64 (two steps
# a block), against the interpreter's 32; non-square output tiles with a GROUP_M that does not divide
# the tile rows. Every scaling and code format.
@pytest.mark.parametrize("tile", [(16, 64, 128, 2), (32, 16, 64, 3)], ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("scaling", ["tensor", "row", "block"])
@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2", "int8"])
def test_scaled_gemm_at_the_gpus_k_steps_matches_float64(monkeypatch, tile, scaling, dtype):
    from rooflint.kernels.scaled_gemm import triton as scaled_triton

    block_m, block_n, block_k, group_m = tile
    _one_config(monkeypatch, scaled_triton._scaled_gemm_kernel, scaled_triton._set_tma_blocks,
                BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m)  # fmt: skip
    params = {"m": 37, "k": 272, "n": 144, "scaling": scaling}
    family, case = _family_case("scaled_gemm", params, dtype, seed=3)
    out = scaled_triton.scaled_gemm(case["a"], case["b"], case["sa"], case["sb"], blocks=scaling == "block")
    _assert_family_check(family, dtype, out, family.reference(case.inputs, params), f"{tile} {scaling}")


# -------------------------------------------------------------------------------- skinny, split K


# The decode GEMM's K split where K is no whole number of K steps (test_gemm_skinny splits K = 160,
# 5 whole steps of 32, and not in fp16): K = 200 in 3 splits of 96 + 96 + 8, with an N tail
# (23 of 16-row tiles), the bias, the GELU and the residual on the summed partials.
@pytest.mark.parametrize("gelu,residual", [(True, False), (False, True)], ids=["gelu", "residual"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_skinny_split_k_with_a_ragged_k_matches_float64(gelu, residual, dtype):
    from rooflint.kernels.gelu_linear.skinny import skinny_linear

    m, k, n = 5, 200, 23
    torch_dtype = DTYPES[dtype]
    gen = torch.Generator().manual_seed(k + n)
    x = torch.randn(m, k, generator=gen).to(torch_dtype)
    w = (torch.randn(n, k, generator=gen) * k**-0.5).to(torch_dtype)
    b = torch.randn(n, generator=gen).to(torch_dtype)
    r = torch.randn(m, n, generator=gen).to(torch_dtype) if residual else None
    z = x.double() @ w.double().T + b.double()
    if gelu:
        z = 0.5 * z * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)))
    expected = z + r.double() if residual else z
    for _ in range(2):  # the second call reuses the workspace: its counters must be back at zero
        got = skinny_linear(x, w, b, gelu=gelu, residual=r, splits=3)
        assert relative_error(got, expected) <= TOL[dtype]


# ------------------------------------------------------------------------------ ceiling FMA chain


def test_fma_ceiling_kernel_matches_the_float64_chain():
    # The FP32 FMA ceiling's chain (fp32 only: it measures the FP32 pipe) was checked against an fp32
    # recomputation; here the float64 one. 3 programs x 5 iterations of 3 FMAs: 15 roundings of ~1,
    # 2^-24 each, far under 1e-6; one FMA left out of the chain is ~1e-4 off.
    out = torch.empty(3 * ceiling_kernels.FMA_BLOCK)
    coef = torch.tensor([0.9999, 1e-4])
    ceiling_kernels.fma_chain(out, coef, iters=5, unroll=3)
    a, b = (float(c) for c in coef)  # the fp32 values the kernel loads
    x = torch.arange(out.numel(), dtype=torch.float32).double() * float(torch.tensor(1e-7, dtype=torch.float32))
    y = x + 0.5
    for _ in range(15):
        x, y = x * a + b, y * a + b
    assert relative_error(out, x + y) <= 1e-6
