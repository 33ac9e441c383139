"""weight_only_gemm's weight stream against the float64 product with the dequantized weight, in
Triton's CPU interpreter (int8 and fp8 codes, per channel and per group, with and without K splits,
under plan()'s tile and under tiles and splits a config asks for), plan()'s rules, and the e4m3 bit
recipe the GPU dequantizes fp8 with."""

from __future__ import annotations

from pathlib import Path
from unittest.mock import patch

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_checks import assert_variant_matches_reference

from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.weight_only_gemm import triton as stream
from rooflint.kernels.weight_only_gemm.triton import StreamTile, weight_only_linear

# (m, k, n, group): one row with a K tail (100 % 32) and an N tail (37 % 16); 16 rows in 32-wide
# groups; odd rows over two N tiles, fewer than the interpreter's 3 "SMs", so K is split in two
# and the last arrival sums; 64-wide groups (two K steps a group) under a split.
SHAPES = [(1, 100, 37, 0), (16, 128, 40, 32), (5, 96, 24, 0), (3, 256, 20, 64)]


@pytest.mark.parametrize("dtype", ["w8a16", "wfp8a16"])
@pytest.mark.parametrize("m,k,n,group", SHAPES)
def test_triton_weight_stream_matches_float64(dtype, m, k, n, group):
    family = get_family("weight_only_gemm")
    params = {"m": m, "k": k, "n": n, "group": group}
    case = family.build_case("custom", params, dtype, torch.device("cpu"), seed=m + n)
    out = weight_only_linear(case["x"], case["w_q"], case["w_scale"], group)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    verdict = check(family, dtype, out, family.reference(case.inputs, params))
    assert verdict.passed, verdict.message


def test_the_split_path_runs_and_the_counters_are_rearmed():
    tile, splits = stream.plan(24, 96, 4, 0, stream.INTERPRETER_SMS)
    assert splits == 2  # 2 N tiles on 3 "SMs"
    family = get_family("weight_only_gemm")
    params = {"m": 4, "k": 96, "n": 24, "group": 0}
    case = family.build_case("custom", params, "w8a16", torch.device("cpu"))
    first = weight_only_linear(case["x"], case["w_q"], case["w_scale"])
    assert torch.equal(weight_only_linear(case["x"], case["w_q"], case["w_scale"]), first)
    assert all(int(count.abs().sum()) == 0 for _, count in stream._WORKSPACES.values())


def test_the_check_catches_groups_scaled_as_channels():
    family = get_family("weight_only_gemm")
    params = {"m": 2, "k": 64, "n": 16, "group": 16}
    case = family.build_case("custom", params, "w8a16", torch.device("cpu"))
    wrong = weight_only_linear(case["x"], case["w_q"], case["w_scale"][:, :1].contiguous(), 0)
    assert not check(family, "w8a16", wrong, family.reference(case.inputs, params)).passed


@pytest.mark.parametrize("variant", ["eager", "bf16_linear"])
def test_pytorch_forms_match_float64(variant):
    params = {"m": 3, "k": 64, "n": 40, "group": 16}
    assert_variant_matches_reference("weight_only_gemm", variant, params, "wfp8a16")


@pytest.mark.parametrize("dtype", ["w8a16", "wfp8a16"])
def test_a_configured_tile_and_split_match_float64(dtype):
    # Two warps on 32 rows (the GPU's default tile), three K splits of one 64-code step each, K and
    # N tails: what `rooflint ab --config BLOCK_N=32,SPLITS=3` runs.
    family = get_family("weight_only_gemm")
    params = {"m": 3, "k": 180, "n": 40, "group": 0}
    case = family.build_case("custom", params, dtype, torch.device("cpu"), seed=7)
    tile = StreamTile(32, 64, 1, 2)
    out = weight_only_linear(case["x"], case["w_q"], case["w_scale"], 0, tile=tile, splits=3)
    verdict = check(family, dtype, out, family.reference(case.inputs, params))
    assert verdict.passed, verdict.message


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 20000),
    k=st.integers(16, 16384),
    m=st.integers(1, 16),
    sms=st.sampled_from([78, 114, 132, 144]),
)
def test_plan_gives_each_warp_its_rows_and_splits_only_narrow_grids(n, k, m, sms):
    with patch.object(stream, "interpreting", lambda: False):  # the GPU's rules, not the interpreter's tile
        tile, splits = stream.plan(n, k, m, 0, sms)
    tiles = -(-n // tile.block_n)
    assert tile.block_n % (stream.MMA_ROWS * tile.warps) == 0 and tile.warps <= 2  # mma.sync, no shared rows
    assert tile.block_n >= 2 * m  # x's bytes from L2 at most W's
    assert 1 <= splits <= stream.MAX_SPLITS
    if tiles >= sms:
        assert splits == 1
    if splits > 1:
        assert k // splits >= stream.K_PER_SPLIT and (splits - 1) * tile.block_k < k  # no empty split


def _e4m3_triton_recipe(codes: torch.Tensor) -> torch.Tensor:
    """E4M3_TO_BF16X4's bit operations on uint8 codes, one 16-bit half at a time: the byte into the
    high byte, exponent and mantissa shifted into bf16's low exponent bits, the sign put back, and
    the bf16 times 2^120 (in float32, exact: the bf16 has at most 4 significant bits)."""
    a = codes.to(torch.int32) << 8
    bits = ((a & 0x7F00) >> 4) | (a & 0x8000)
    as_bf16 = bits.to(torch.int16).view(torch.bfloat16)
    return as_bf16.float() * 2.0**120


def _prmt(a: int, b: int, selector: int) -> int:
    """PTX prmt.b32 in its generic mode: each selector nibble's low 3 bits pick a byte of {b, a}, its
    top bit replicates that byte's sign over the target byte."""
    source = [(a >> 8 * i) & 0xFF for i in range(4)] + [(b >> 8 * i) & 0xFF for i in range(4)]
    out = 0
    for n in range(4):
        nibble = (selector >> 4 * n) & 0xF
        byte = source[nibble & 7]
        if nibble & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << 8 * n
    return out


def _e4m3_cuda_recipe(words: list[int]) -> list[float]:
    """cuda.cu's dequantize4<kE4m3> on 32-bit words of four codes: PRMT with sign replication, << 4,
    the mask, and the bf16 times 2^120 (in float64, exact: the bf16 has at most 4 significant bits).
    The four values of each word, in code order."""
    values = []
    for word in words:
        for selector in (0x9180, 0xB3A2):
            bits = (_prmt(word, 0, selector) << 4) & 0x87F087F0
            for half in (bits & 0xFFFF, bits >> 16):
                values.append(torch.tensor(half, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).item())
    return [value * 2.0**120 for value in values]


FINITE_E4M3 = [c for c in range(256) if c & 0x7F != 0x7F]  # 0x7f, 0xff: NaN


def test_the_triton_e4m3_bit_recipe_is_exact_for_every_finite_code():
    codes = torch.tensor(FINITE_E4M3, dtype=torch.uint8)
    expected = codes.view(torch.float8_e4m3fn).float()
    assert torch.equal(_e4m3_triton_recipe(codes), expected)
    assert "0x5140" in stream.E4M3_TO_BF16X4.value and "0x7b807b80" in stream.E4M3_TO_BF16X4.value


def test_the_cuda_e4m3_bit_recipe_is_exact_for_every_finite_code_in_every_byte():
    # every code in every byte position of a word, beside a neighbour of either sign
    words = [(c << 8 * i) | (0x80 * (i % 2) + 0x31) << 8 * ((i + 1) % 4) for c in FINITE_E4M3 for i in range(4)]
    got = _e4m3_cuda_recipe(words)
    for w, word in enumerate(words):
        expected = torch.tensor([(word >> 8 * i) & 0xFF for i in range(4)], dtype=torch.uint8)
        expected = expected.view(torch.float8_e4m3fn).double().tolist()
        assert got[4 * w : 4 * w + 4] == expected, hex(word)
    source = (Path(stream.__file__).parent / "cuda.cu").read_text()
    assert all(part in source for part in ("0x9180u", "0xb3a2u", "<< 4) & 0x87f087f0u", "0x7b807b80u"))


@pytest.mark.parametrize(
    "k,cuda,words",
    [(8192, 1, ["held", "K = 8192", "CUDA=2"]), (256, 2, ["streamed", "K = 256", "CUDA=1"]), (768, 3, ["1 (the held"])],
)
def test_bf16_skinny_refuses_a_forced_cuda_kernel_that_cannot_split_k_before_any_launch(k, cuda, words):
    # `rooflint ab ... -V bf16_skinny --config CUDA=1,2`: an entry whose kernel takes no such K is
    # dropped at its build with the reason, not at a launch on the GPU.
    family = get_family("weight_only_gemm")
    params = {"m": 8, "k": k, "n": 16, "group": 0}
    case = family.build_case("custom", params, "w8a16", torch.device("cpu"), seed=1)
    with pytest.raises(ValueError) as refused:
        stream.bf16_skinny(case, config={"PDL": None, "CUDA": cuda})
    assert all(word in str(refused.value) for word in words), str(refused.value)
