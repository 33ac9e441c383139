"""Issue 14's kernels on CPU: the Hopper attention and the SM-count GEMM under the Triton
interpreter against float64, the tile rule, and the read-stream memory ceiling.

The interpreter runs the kernels' own code, TMA descriptor loads and stores included (triton 3.9
interprets host TensorDescriptors and the ones a warp-specialized kernel builds itself), so these are
the descriptor paths the GPU runs, at small tiles.
"""

from __future__ import annotations

import pytest
import torch
from kernel_checks import assert_variant_matches_reference

from rooflint.core import roofs
from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.core.specs import get_spec
from rooflint.engine import ceiling_kernels
from rooflint.engine.correctness import check
from rooflint.kernels.attention import hopper as hopper
from rooflint.kernels.gelu_linear import wavefit as gemm

Config = hopper.AttentionConfig


# ------------------------------------------------------------------------------------ attention


# N=1 (one key) and 37 (three 16-row tiles, the last ragged) at D=64; 37 at D=128; both dtypes.
@pytest.mark.parametrize("n,d", [(1, 64), (37, 64), (37, 128)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_hopper_attention_variant_matches_reference(n, d, causal, dtype):
    assert_variant_matches_reference(
        "attention", "triton_hopper", {"B": 2, "H": 2, "N": n, "D": d, "causal": causal}, dtype
    )


# The two kernel structures at the tile shapes that exercise them: the two-loop kernel with a
# diagonal block of two key tiles (32 x 16), and the warp-specialized single loop (its code runs in
# the interpreter; only the GPU splits it into producer and consumer warps), on a ragged N (40) and
# on an N that is a whole number of tiles (64: the non-causal single loop then has no mask at all);
# and the two loops with the next tile's Q K^T issued ahead of the softmax (its last one reads past the head).
@pytest.mark.parametrize(
    "config",
    [
        Config(32, 16, 4, 2),
        Config(16, 16, 4, 1, True),
        Config(32, 16, 4, 2, True),
        Config(32, 16, 4, 2, qk_ahead=True),
        Config(16, 16, 4, 1, qk_ahead=True),
    ],
    ids=lambda c: c.label,
)
@pytest.mark.parametrize("n", [40, 64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_hopper_attention_structures_match_reference(config, n, causal, dtype):
    family = get_family("attention")
    params = {"B": 1, "H": 3, "N": n, "D": 64, "causal": causal}
    case = family.build_case("custom", params, dtype, torch.device("cpu"), seed=n)
    out = hopper.hopper_attention(case["q"], case["k"], case["v"], causal, config=config)
    verdict = check(family, dtype, out, family.reference(case.inputs, params))
    assert verdict.passed, f"{config.label} n={n} causal={causal} {dtype}: {verdict.message}"


def test_hopper_attention_head_dim_256():
    # D=256 is beyond the family's presets (the sweep times it); the kernel must still be exact.
    family = get_family("attention")
    q, k, v = (torch.randn(1, 2, 20, 256).to(torch.float16) for _ in range(3))
    out = hopper.hopper_attention(q, k, v, True)
    expected = family.reference({"q": q, "k": k, "v": v}, {"causal": True})
    assert check(family, "fp16", out, expected).passed


def test_hopper_attention_refuses_qk_ahead_with_warp_specialization():
    q = torch.randn(1, 1, 16, 64).to(torch.float16)
    with pytest.raises(VariantSkipped, match="warp-specialized"):
        hopper.prepare(q, q, q, False, config=Config(16, 16, 4, 1, True, qk_ahead=True))


def test_hopper_attention_refuses_what_it_cannot_run():
    q = torch.randn(1, 1, 8, 64)
    with pytest.raises(VariantSkipped, match="fp16 or bf16"):
        hopper.hopper_attention(q, q, q, False)  # fp32: the tensor cores would run it as TF32
    with pytest.raises(VariantSkipped, match="head dims"):
        hopper.hopper_attention(*(torch.randn(1, 1, 8, 96).half() for _ in range(3)), False)
    with pytest.raises(VariantSkipped, match="multiple of block_n"):
        hopper.hopper_attention(q.half(), q.half(), q.half(), True, config=Config(16, 32, 4, 1))


def test_hopper_path_is_chosen_on_sm90_only(monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert "sm_80" in hopper.unsupported_reason(cuda) and "`triton` variant" in hopper.unsupported_reason(cuda)
    assert "sm_80" in gemm.unsupported_reason(cuda)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
    assert "sm_100" in hopper.unsupported_reason(cuda)  # a Blackwell needs its own tuning and tcgen05
    assert gemm.unsupported_reason(cuda) is None  # TMA exists on sm_90 and later
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert hopper.unsupported_reason(cuda) is None and gemm.unsupported_reason(cuda) is None


def test_wgmma_cuda_attention_is_offered_on_sm90_only(monkeypatch):
    # The FA3-style CUDA kernel (attention_hopper.cu) runs only where wgmma and TMA exist; elsewhere
    # its row is skipped with the reason and the sm_80 `cuda` kernel is the path. D=256 in a build
    # that leaves it out (D256=0) is a skip naming the dims it has.
    # None of this compiles anything: the checks come before the build.
    from rooflint.kernels.attention import cuda

    family = get_family("attention")
    variant = family.variants["cuda_hopper"]
    assert variant.kind == "cuda"
    case = family.build_case("custom", {"B": 1, "H": 1, "N": 8, "D": 128, "causal": False}, "bf16", torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(VariantSkipped, match="sm_90.*`cuda` is the sm_80 path"):
        variant.build(case)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
    with pytest.raises(VariantSkipped, match="sm_90"):
        variant.build(case)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    wide = family.build_case("custom", {"B": 1, "H": 1, "N": 8, "D": 256, "causal": False}, "bf16", torch.device("cpu"))
    with pytest.raises(VariantSkipped, match=r"\(D256=0\) is for head_dim 64, 128$"):
        variant.build(wide, config={**cuda.HOPPER_CUDA_CONFIG, "D256": 0})


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({"MAX_CHAINS": 3}, "MAX_CHAINS is 1, 2, 4 or 8"),
        ({"MAX_CHAINS_D64": 16}, "MAX_CHAINS_D64 is 1, 2, 4 or 8"),
        ({"CONSUMERS_D64": 4}, "CONSUMERS_D64 is 2 or 3"),
    ],
)
def test_a_cuda_hopper_config_the_kernel_cannot_take_is_a_skip_naming_the_valid_values(monkeypatch, config, reason):
    # Refused before nvcc runs: the source's static_assert would only say that it failed to build.
    from rooflint.kernels.attention import cuda

    family = get_family("attention")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    params = {"B": 1, "H": 1, "N": 8, "D": 64, "causal": False}
    case = family.build_case("custom", params, "bf16", torch.device("cpu"))
    with pytest.raises(VariantSkipped, match=reason):
        family.variants["cuda_hopper"].build(case, config={**cuda.HOPPER_CUDA_CONFIG, **config})


def test_config_tables_are_causal_safe():
    # Every configuration the variant or the sweep may launch must take causal inputs: the diagonal
    # block is whole key tiles only when block_m is a multiple of block_n.
    for d in hopper.HEAD_DIMS:
        for config in (hopper.DEFAULT_CONFIGS[d, False], hopper.DEFAULT_CONFIGS[d, True], *hopper.SWEEP_CANDIDATES[d]):
            assert config.block_m % config.block_n == 0, (d, config)
            # Three-stage warp-specialized configs returned inf on Triton 3.6 (H100 and H200).
            assert not (config.warp_specialize and config.stages > 2), (d, config)
            # Nor does Triton 3.6 compile Q K^T ahead in a warp-specialized loop.
            assert not (config.warp_specialize and config.qk_ahead), (d, config)
        assert len(hopper.SWEEP_CANDIDATES[d]) <= 6


# ----------------------------------------------------------------------------------------- GEMM

# (m, k, n) as in test_gelu_linear: K and N multiples of 8 (TMA rows), M odd, K and N tails.
GEMM_SHAPES = [(1, 8, 8), (37, 72, 48), (33, 64, 72), (64, 200, 96)]


@pytest.mark.parametrize("m,k,n", GEMM_SHAPES)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_wavefit_variant_matches_reference(m, k, n, dtype):
    assert_variant_matches_reference("gelu_linear", "triton_wavefit", {"m": m, "k": k, "n": n}, dtype)


@pytest.mark.parametrize(
    "tile",
    # A 128-wide tile (its output leaves in two half-width TMA stores), 2 programs over 8 tiles, and
    # tiles of two blocks side by side (32 + 16 and 128 + 64 columns; N = 136 ends inside the side block),
    # warp-specialized tiles, whose descriptors the kernel builds itself, and odd waves reversed in K.
    [
        gemm.GemmTile(16, 128, 32, 1, 4, 2, 1),
        gemm.GemmTile(16, 32, 16, 1, 4, 1, 2),
        gemm.GemmTile(16, 48, 16, 1, 4, 2, 1),
        gemm.GemmTile(16, 192, 32, 1, 4, 1, 1),
        gemm.GemmTile(16, 128, 32, 1, 4, 2, 1, warp_specialize=True),
        gemm.GemmTile(16, 48, 16, 1, 4, 2, 1, warp_specialize=True),
        # Odd waves walking K backwards (6 programs over 15 tiles: every program runs an odd wave).
        gemm.GemmTile(16, 32, 16, 1, 4, 1, 2, reverse_odd_waves=True),
        gemm.GemmTile(16, 48, 16, 1, 4, 2, 1, reverse_odd_waves=True),
        gemm.GemmTile(16, 48, 16, 1, 4, 2, 1, warp_specialize=True, reverse_odd_waves=True),
    ],
    ids=lambda t: t.label,
)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("early_bias", [True, False], ids=["bias-before-k-loop", "bias-after"])
def test_gemm_tiles_match_reference(tile, dtype, early_bias):
    family = get_family("gelu_linear")
    params = {"m": 37, "k": 72, "n": 136}
    case = family.build_case("custom", params, dtype, torch.device("cpu"))
    out = gemm.prepare(case["x"], case["w"], case["b"], tile=tile, early_bias=early_bias)()
    verdict = check(family, dtype, out, family.reference(case.inputs, params))
    assert verdict.passed, f"{tile.label}: {verdict.message}"


def test_gemm_refuses_rows_tma_cannot_address():
    family = get_family("gelu_linear")
    case = family.build_case("custom", {"m": 4, "k": 12, "n": 8}, "bf16", torch.device("cpu"))
    with pytest.raises(VariantSkipped, match="multiples of 8"):
        family.variants["triton_wavefit"].build(case)


def test_tile_choice_follows_the_sm_count():
    gpt2, square = (1024, 3072), (8192, 8192)
    assert gemm.wave_fill(192, 132) == pytest.approx(192 / 264)
    # 132 SMs (H100 SXM, H200): GPT-2's 96 tiles of 128x256 or 192 of 128x128 fill 73% of their
    # last wave; 128 of 128x192 fill 97% in one. 8192^3 keeps the big tile (2048 tiles, 97%).
    assert (gemm.choose_tile(*gpt2, 132).block_m, gemm.choose_tile(*gpt2, 132).block_n) == (128, 192)
    assert gemm.choose_tile(*square, 132) is gemm.TILES[0]
    # 108 SMs (A100): 96 big tiles already fill 89%: the big tile stays.
    assert gemm.choose_tile(*gpt2, 108) is gemm.TILES[0]
    # No tile fills enough: the fullest one, the larger on a tie (114 SMs: every tile fills 84%).
    assert gemm.choose_tile(*gpt2, 114) is gemm.TILES[0]
    # A tiny GEMM: the tile that busies the most SMs (4 of 128x64, first of the two that tie).
    assert gemm.choose_tile(128, 256, 132) is gemm.TILES[3]
    assert len(gemm.SWEEP_CANDIDATES) <= 6


# ----------------------------------------------------------------------------------- ceilings


def test_read_stream_reads_every_element_once():
    # Under the interpreter: program p sums groups p, p+P, ... of READ_UNROLL blocks. Each partial
    # must be exactly that (integer values, exact in fp32), or the bytes it claims to read are fiction.
    group = ceiling_kernels.READ_BLOCK * 2
    src = torch.randint(0, 8, (7 * group,)).float()
    partials = torch.full((3,), -1.0)
    ceiling_kernels.read_sum(src, partials, unroll=2)
    groups = src.view(7, group).sum(dim=1)
    expected = torch.stack([groups[p::3].sum() for p in range(3)])
    assert torch.equal(partials, expected)


def test_memory_ceiling_is_the_faster_stream():
    h200 = ceiling_kernels.memory_ceilings(copy_gbps=4231.0, read_gbps=4587.0)
    assert h200 == {"copy_bandwidth_gbps": 4231.0, "read_bandwidth_gbps": 4587.0, "memory_bandwidth_gbps": 4587.0}
    assert ceiling_kernels.memory_ceilings(3000.0, 2900.0)["memory_bandwidth_gbps"] == 3000.0


def test_stored_streams_keep_the_datasheet_as_the_outer_roof(tmp_path):
    # memory_bandwidth_gbps (the faster stream) replaces the datasheet's under --roof measured; the
    # two streams are stored beside it for the record and replace nothing.
    values = {**ceiling_kernels.memory_ceilings(4231.0, 4587.0), "tensor_bf16_tflops": 778.0}
    roofs.save_ceilings("h200", "NVIDIA H200", values, tmp_path)
    assert roofs.load_measured_ceilings("h200", tmp_path)["read_bandwidth_gbps"] == 4587.0
    datasheet = get_spec("h200")
    measured = roofs.roof_spec(datasheet, "measured", tmp_path)
    assert measured.bandwidth_gbps == 4587.0 < datasheet.bandwidth_gbps
    assert "read_bandwidth_gbps" not in measured.overrides and "copy_bandwidth_gbps" not in measured.overrides
