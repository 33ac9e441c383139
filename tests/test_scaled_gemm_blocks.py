"""scaled_gemm's per-block scales (DeepSeek-V3's: A per 1 x 128, B per 128 x 128): the quantization,
the Triton kernel against the float64 product of the dequantized operands in Triton's CPU
interpreter, the eager forms, and the bytes the cost model counts."""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.scaled_gemm.formats import SCALE_BLOCK, dequantize64, expand_blocks, quantize_blocks
from rooflint.kernels.scaled_gemm.triton import scaled_gemm

CPU = torch.device("cpu")
# (m, k, n): M, K and N tails of the 128-wide blocks (272 = 2 x 128 + 16, 144 = 128 + 16) and of
# the interpreter's 32-wide tiles; one row; several row tiles over the interpreter's 3 programs.
SHAPES = [(37, 272, 144), (1, 48, 32), (130, 160, 48)]


def _case(dtype, m, k, n, seed=0):
    family = get_family("scaled_gemm")
    params = {"m": m, "k": k, "n": n, "scaling": "block"}
    return family, family.build_case("custom", params, dtype, CPU, seed=seed)


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_triton_block_scaled_gemm_matches_float64(m, k, n):
    family, case = _case("fp8_e4m3", m, k, n, seed=m + k)
    assert case["sa"].shape == (m, -(-k // 128)) and case["sb"].shape == (-(-n // 128), -(-k // 128))
    out = scaled_gemm(case["a"], case["b"], case["sa"], case["sb"], blocks=True)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    verdict = check(family, "fp8_e4m3", out, family.reference(case.inputs, case.params))
    assert verdict.passed, verdict.message


def test_each_k_block_takes_its_own_scales():
    # Operands whose second K block is 1000x the first: a kernel that scaled every K step by the
    # first block's scales (a per-row kernel) would be off by orders of magnitude.
    family = get_family("scaled_gemm")
    gen = torch.Generator().manual_seed(3)
    m, k, n = 24, 256, 48
    magnitude = torch.ones(k)
    magnitude[SCALE_BLOCK:] = 1000.0
    a, sa = quantize_blocks(torch.randn(m, k, generator=gen) * magnitude, torch.float8_e4m3fn, 1)
    b, sb = quantize_blocks(torch.randn(n, k, generator=gen) * magnitude, torch.float8_e4m3fn, SCALE_BLOCK)
    inputs, params = {"a": a, "b": b, "sa": sa, "sb": sb}, {"m": m, "k": k, "n": n, "scaling": "block"}
    reference = family.reference(inputs, params)
    assert check(family, "fp8_e4m3", scaled_gemm(a, b, sa, sb, blocks=True), reference).passed
    first_block_only = (sa[:, :1].expand_as(sa).contiguous(), sb[:, :1].expand_as(sb).contiguous())
    assert not check(family, "fp8_e4m3", scaled_gemm(a, b, *first_block_only, blocks=True), reference).passed


@settings(max_examples=25, deadline=None)
# x / scale = 123.49999997 exactly, 123.5 in fp32: an fp32 quotient rounded half to even to 124
@example(dtype=torch.int8, rows=56, k=77, block_rows=1, seed=77)
@given(
    dtype=st.sampled_from([torch.float8_e4m3fn, torch.float8_e5m2, torch.int8]),
    rows=st.integers(1, 140),
    k=st.integers(1, 300),
    block_rows=st.sampled_from([1, SCALE_BLOCK]),
    seed=st.integers(0, 2**16),
)
def test_block_quantization_keeps_each_value_within_its_blocks_step(dtype, rows, k, block_rows, seed):
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(seed)) * 5
    codes, scale = quantize_blocks(x, dtype, block_rows)
    assert scale.shape == (-(-rows // block_rows), -(-k // SCALE_BLOCK)) and scale.dtype == torch.float32
    per_element = expand_blocks(scale, rows, k, block_rows).double()
    back = dequantize64(codes, per_element)
    # Each block's amax maps to the format's largest value, so nothing saturates: the error is the
    # rounding, at most half a step (int8: half the scale; e4m3 2^-4 and e5m2 2^-3 of the value,
    # plus half the smallest subnormal step near zero).
    if dtype == torch.int8:
        bound = per_element / 2
    else:
        mantissa, subnormal = (3, 2.0**-9) if dtype == torch.float8_e4m3fn else (2, 2.0**-16)
        bound = x.double().abs() * 2.0 ** -(mantissa + 1) + per_element * subnormal / 2
    assert ((back - x.double()).abs() <= bound + 1e-9).all()


def test_cost_counts_the_block_scales_bytes():
    family, case = _case("fp8_e4m3", 37, 272, 144)
    params = case.params
    scales = 37 * 3 + 2 * 3  # sa: a row's 3 K blocks; sb: 2 x 3 blocks of 128 x 128
    assert case["sa"].numel() + case["sb"].numel() == scales
    assert family.cost(params, "fp8_e4m3").bytes == 37 * 272 + 144 * 272 + 4 * scales + 2 * 37 * 144
    # One sa * sb and one multiply-add of the block's partial sum, per output and K block.
    assert family.cost(params, "fp8_e4m3").cuda_flops == 3 * 37 * 144 * 3


def test_eager_forms_with_block_scales():
    family, case = _case("fp8_e4m3", 37, 272, 144, seed=5)
    reference = family.reference(case.inputs, case.params)
    unfused = family.variants["eager_unfused"].build(case)()
    assert check(family, "fp8_e4m3", unfused, reference).passed
    # torch's CPU _scaled_mm has no block-wise form: the baseline row is a skip with torch's reason.
    with pytest.raises(VariantSkipped, match="torch._scaled_mm with block scales refuses"):
        family.variants["eager"].build(case)
    _, int8_case = _case("int8", 20, 64, 32)
    with pytest.raises(VariantSkipped, match="no int8 GEMM with block scales"):
        family.variants["eager"].build(int8_case)


@pytest.mark.parametrize("m,k,n", [(300, 1040, 528), (37, 272, 144), (256, 512, 768), (5, 1664, 1)])
def test_torch_block_scales_are_laid_out_as_cublaslt_reads_them(m, k, n):
    """The rule of torch's ScaledBlas.cpp (is_blockwise_1x128_scaling, is_blockwise_128x128_scaling)
    and torch/_meta_registrations.py (_scaled_mm_v2): scale_a [M, L] with stride (1, M); scale_b
    [L, cdiv(N, 128)] whose block rows sit L4 = round_up(L, 4) apart, L = cdiv(K, 128)."""
    from rooflint.kernels.scaled_gemm import cublas_block_scales

    sa = torch.rand(m, -(-k // SCALE_BLOCK))
    sb = torch.rand(-(-n // SCALE_BLOCK), -(-k // SCALE_BLOCK))
    blocks_n, blocks_k = sb.shape
    pitch = -(-blocks_k // 4) * 4
    scale_a, scale_b = cublas_block_scales(sa, sb)
    assert scale_a.shape == (m, blocks_k) and scale_a.stride() == (1, m) and torch.equal(scale_a, sa)
    assert scale_b.shape == (blocks_k, blocks_n) and scale_b.stride() == (1, pitch)
    assert torch.equal(scale_b.t(), sb)
    # What cuBLASLt reads from the two pointers: A's scales M-major, B's block rows L4 apart.
    a_storage = torch.as_strided(scale_a, (blocks_k, m), (m, 1), scale_a.storage_offset())
    b_storage = torch.as_strided(scale_b, (blocks_n, pitch), (pitch, 1), scale_b.storage_offset())
    assert torch.equal(a_storage, sa.t())
    assert torch.equal(b_storage[:, :blocks_k], sb) and not b_storage[:, blocks_k:].any()
