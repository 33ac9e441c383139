"""GPU tier: the weight-only decode GEMM that holds int8 / e4m3 codes in registers across the PDL wait
(kernels/weight_only_gemm/cuda.cu), against float64 over the model's shapes and odd ones, every K split,
with and without PDL, its fused bias, GELU and residual, and a QKV projection's RoPE and paged K/V append."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import assert_appended, rope_tables

from rooflint.kernels.common.pdl import decode_chain
from rooflint.kernels.scaled_gemm.formats import dequantize64, quantize
from rooflint.kernels.weight_only_gemm import cuda

pytestmark = pytest.mark.gpu

FORMATS = [torch.int8, torch.float8_e4m3fn]
TOL = 2e-2  # bf16 output: one rounding of a value of up to (1 + |y|)


# (m, k, n): Llama-3.2-1B's four projections at B=8 (down: K = 8192, 32 steps on 16 warps), GPT-2's at
# B=8 and 16, Llama-3.1-8B's K = 4096 at B=1; then M of 1, 3, 9 and 16 (two x tiles), N not a multiple
# of 16 (the last row block reads past N and must not write), one row block, and many row blocks.
SHAPES = [(8, 2048, 3072), (8, 2048, 2048), (8, 2048, 16384), (8, 8192, 2048), (8, 768, 2304), (16, 3072, 768),
          (1, 4096, 6144), (1, 768, 37), (3, 1024, 130), (9, 2048, 72), (16, 768, 16), (5, 3072, 1000)]  # fmt: skip


def inputs(m, k, n, fmt, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda", generator=gen) * k**-0.5
    codes, scale = quantize(w, fmt, "row")
    b = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
    r = torch.randn(m, n, device="cuda", generator=gen).to(torch.bfloat16)
    return x, codes, scale, b, r


def exact(x, codes, scale, b=None, gelu=False, r=None):
    y = F.linear(x.double(), dequantize64(codes, scale, 0), None if b is None else b.double())
    y = F.gelu(y, approximate="tanh") if gelu else y
    return y + r.double() if r is not None else y


def close(got, want):
    err = (got.double() - want).abs().max().item()
    return err <= TOL * (1 + want.abs().max().item()), err


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("fmt", FORMATS, ids=["int8", "e4m3"])
def test_every_fusion_matches_float64(m, k, n, fmt):
    x, codes, scale, b, r = inputs(m, k, n, fmt, m * 7919 + k + n)
    assert cuda.why_not(x, codes, scale, r) is None
    for bias, gelu, residual in ((None, False, None), (b, False, None), (b, True, None), (None, False, r)):
        got = cuda.codes_linear(x, codes, scale, bias, residual, gelu=gelu, pdl=False)
        ok, err = close(got, exact(x, codes, scale, bias, gelu, residual))
        assert ok, (bias is not None, gelu, residual is not None, err)


@pytest.mark.parametrize("fmt", FORMATS, ids=["int8", "e4m3"])
@pytest.mark.parametrize("m,k", [(8, 768), (8, 2048), (16, 3072), (8, 8192), (1, 4096)])
def test_every_k_split_gives_the_same_sums(m, k, fmt):
    """Every steps value that splits K computes the same product, within one bf16 rounding."""
    x, codes, scale, _, _ = inputs(m, k, 200, fmt, k + m)
    want = exact(x, codes, scale)
    splits = [s for s in cuda.STEPS if k % (16 * s) == 0 and (4 if m <= 8 else 8) <= k // (16 * s) <= 16]
    splits = [s for s in splits if m <= 8 or s <= 16]
    assert splits
    for steps in splits:
        ok, err = close(cuda.codes_linear(x, codes, scale, steps=steps, pdl=False), want)
        assert ok, (steps, err)


def test_under_pdl_in_a_chain_matches_and_is_repeatable():
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90")
    x, codes, scale, b, r = inputs(8, 2048, 3072, torch.int8, 5)
    first = cuda.codes_linear(x, codes, scale, b, r, pdl=False)
    with decode_chain():
        # A chain of dependent launches: each reads the previous one's output after its wait.
        y = x
        for _ in range(4):
            y = cuda.codes_linear(y[:, :2048].contiguous(), codes[:, :2048].contiguous(), scale, pdl=True)
        again = cuda.codes_linear(x, codes, scale, b, r, pdl=True)
    torch.cuda.synchronize()
    want = x
    for _ in range(4):
        want = cuda.codes_linear(want[:, :2048].contiguous(), codes[:, :2048].contiguous(), scale, pdl=False)
    assert torch.equal(again, first)  # the sums are in a fixed order: bit for bit
    assert torch.equal(y, want)


def test_every_code_dequantizes_exactly():
    """One-hot rows of x pick each code of W: y is the code times its scale, for all 256 int8 codes and
    every finite e4m3 code (bit patterns run along K, one row of W holds all of them)."""
    k = 256
    x = torch.eye(k, device="cuda", dtype=torch.bfloat16)
    for fmt in FORMATS:
        bits = torch.arange(256, dtype=torch.uint8, device="cuda")
        codes = bits.view(torch.int8) if fmt == torch.int8 else bits.view(torch.float8_e4m3fn)
        finite = torch.isfinite(codes.float())
        codes = torch.where(finite, codes.float(), 0.0).to(fmt).view(1, k).repeat(16, 1).contiguous()
        scale = torch.ones(16, 1, device="cuda")
        got = torch.cat([cuda.codes_linear(x[i : i + 8], codes, scale, pdl=False) for i in range(0, k, 8)])
        assert torch.equal(got[:, 0].float(), codes[0].float()), fmt


@pytest.mark.parametrize("fmt", FORMATS, ids=["int8", "e4m3"])
@pytest.mark.parametrize("m,k,ffn", [(8, 2048, 8192), (1, 4096, 14336), (3, 768, 40), (12, 1024, 72), (16, 512, 1000)])
def test_swiglu_in_the_epilogue_matches_float64_and_the_unfused_path(m, k, ffn, fmt):
    """silu(gate) * up from [gate; up] rows: against float64, and within one bf16 rounding of the unfused
    GEMM (gate and up rounded to bf16) followed by silu(gate) * up."""
    x, codes, scale, b, _ = inputs(m, k, 2 * ffn, fmt, m + k + ffn)
    assert cuda.why_not(x, codes, scale, swiglu=True) is None
    for bias in (None, b):
        got = cuda.codes_swiglu(x, codes, scale, bias, pdl=False)
        both = exact(x, codes, scale, bias)
        want = F.silu(both[:, :ffn]) * both[:, ffn:]
        ok, err = close(got, want)
        assert ok, (bias is not None, err)
        unfused = cuda.codes_linear(x, codes, scale, bias, pdl=False).float()
        again = (F.silu(unfused[:, :ffn]) * unfused[:, ffn:]).to(torch.bfloat16)
        assert (got.float() - again.float()).abs().max().item() <= 1e-2 * (1 + again.float().abs().max().item())


# (m, tokens, start, heads, kv_heads, head_dim, k, bias): Llama-3.2-1B's QKV at B=8, 1 and 12 (two x tiles),
# Llama-3.1-8B's (head_dim 128) at B=1, Qwen2.5-0.5B's (bias, K = 896 at 8 steps), and a short prefill's
# rows (3 tokens a sequence) with an odd head count and head_dim 16.
ROPE_SHAPES = [(8, 1, 511, 32, 8, 64, 2048, False), (1, 1, 0, 32, 8, 64, 2048, False),
               (12, 1, 100, 32, 8, 64, 2048, False), (1, 1, 700, 32, 8, 128, 4096, False),
               (8, 1, 33, 14, 2, 64, 896, True), (6, 3, 5, 3, 1, 16, 512, True)]  # fmt: skip


@pytest.mark.parametrize("fmt", FORMATS, ids=["int8", "e4m3"])
@pytest.mark.parametrize("m,tokens,start,heads,kv_heads,d,k,bias", ROPE_SHAPES)
def test_qkv_rope_matches_float64_and_appends_the_rotated_k(m, tokens, start, heads, kv_heads, d, k, bias, fmt):
    """RoPE and the paged K/V append in the epilogue, against the float64 reference on the dequantized
    weight (the product rounded once, then rotated), with and without the append and PDL; the cache
    gets exactly the rotated K and the V, and no other slot is written."""
    from rooflint.kernels.gelu_linear import skinny, skinny_pdl

    n, width = (heads + 2 * kv_heads) * d, (heads + kv_heads) * d
    x, codes, scale, b, _ = inputs(m, k, n, fmt, m + start + d)
    b = b if bias else None
    assert cuda.why_not_rope(m, codes, scale, width, d) is None
    cos, sin = rope_tables(start + tokens + 8, d, torch.bfloat16)
    gen = torch.Generator(device="cuda").manual_seed(m + d)
    pool = 4 * m * kv_heads
    slots = torch.randperm(pool, device="cuda", generator=gen)[: m * kv_heads]
    want = skinny_pdl.qkv_rope_reference(x, dequantize64(codes, scale, 0), b, cos, sin, start, tokens, width, d)
    for appends, pdl in ((False, False), (True, False), (True, True)):
        k_pool = torch.full((pool, d), float("nan"), dtype=torch.bfloat16, device="cuda")
        v_pool = torch.full((pool, d), float("nan"), dtype=torch.bfloat16, device="cuda")
        append = skinny.KVAppend(k_pool, v_pool, slots, heads * d, kv_heads, d) if appends else None
        if pdl and torch.cuda.get_device_capability()[0] < 9:
            continue
        with decode_chain() if pdl else contextlib.nullcontext():
            got = cuda.codes_qkv_rope(x, codes, scale, b, cos, sin, start, tokens, width, d, append, pdl=pdl)
        torch.cuda.synchronize()
        ok, err = close(got, want.double())
        assert ok, (appends, pdl, err)
        if appends:
            assert_appended(got, k_pool, v_pool, slots, heads, width, d)


@pytest.mark.parametrize("fmt", FORMATS, ids=["int8", "e4m3"])
def test_qkv_rope_is_the_unfused_projection_then_the_rope_kernel_within_one_rounding(fmt):
    """Llama-3.2-1B's quantized decode step: the fused output against the same kernel's plain QKV product
    then models/ops/rope_append.py's kernel. The product is the same sum in the same order; only the fp32
    rotation's contraction into FMAs may differ, by at most one rounding of the result."""
    from rooflint.models.ops.rope_append import rope_append

    m, heads, kv_heads, d, k, start = 8, 32, 8, 64, 2048, 300
    n, width = (heads + 2 * kv_heads) * d, (heads + kv_heads) * d
    x, codes, scale, _, _ = inputs(m, k, n, fmt, 3)
    cos, sin = rope_tables(start + 8, d, torch.bfloat16)
    got = cuda.codes_qkv_rope(x, codes, scale, None, cos, sin, start, 1, width, d, pdl=False)
    unfused = cuda.codes_linear(x, codes, scale, pdl=False)
    rope_append(unfused, cos, sin, 1, start, heads, kv_heads, d, None)
    ulp = 2.0**-7 * unfused.double().abs()
    assert ((got.double() - unfused.double()).abs() <= ulp + 1e-6).all()


def test_qkv_rope_refuses_what_its_epilogue_cannot_pair():
    x, codes, scale, _, _ = inputs(8, 2048, 3072, torch.int8, 1)
    cos, sin = rope_tables(16, 64, torch.bfloat16)
    assert "multiple of 16" in cuda.why_not_rope(8, codes, scale, 24 * 40, 40)
    assert "whole number of heads" in cuda.why_not_rope(8, codes, scale, 100, 64)
    with pytest.raises(ValueError, match="must be bf16"):
        cuda.codes_qkv_rope(x, codes, scale, None, cos.float(), sin.float(), 0, 1, 2048, 64)
