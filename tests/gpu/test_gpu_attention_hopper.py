"""GPU tier: the wgmma/TMA attention (attention_hopper.cu) against float64 on an sm_90 GPU.

The generic CUDA-variant test covers the family's small preset (D=64, N=130). This one adds what
the kernel's structure makes risky: D=128 (two TMA boxes per row, the second descriptor half),
N=1 (one key, a ragged single tile), N exactly one or two tiles (no mask at all when not causal),
ragged multi-tile N (the mask on the last tile, zero-filled rows past the head's end), and enough
tiles that the K/V ring wraps several times (mbarrier phases flip). At D=64 a block is three
consumers' 192 rows against 128-key tiles: N=192 and 320 put the causal diagonal across two key
tiles and a block's last consumers past the head's end, and the turn ring has three hand-overs.
"""

from __future__ import annotations

import pytest
import torch
from kernel_checks import assert_attention_matches_float64, assert_repeatable

from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.attention import cuda
from rooflint.kernels.attention import hopper as hopper

pytestmark = pytest.mark.gpu


def _hopper_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"the wgmma attention runs on sm_90 only, this is {torch.cuda.get_device_name()}")


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("n", [1, 128, 256, 130, 192, 320, 777, 1536])
@pytest.mark.parametrize("causal", [False, True])
def test_wgmma_attention_matches_float64(d, n, causal):
    _hopper_or_skip()
    variant = get_family("attention").variants["cuda_hopper"]
    assert_attention_matches_float64("cuda_hopper", d, n, causal, lambda case: variant.build(case)())


# D=256: 80-key tiles, so N=80 and 160 are whole tiles, 130 and 777 ragged, and a
# 64-row consumer's causal diagonal crosses two tiles wherever 80 does not divide its first row.
@pytest.mark.parametrize("n", [1, 80, 160, 130, 200, 777, 1536])
@pytest.mark.parametrize("causal", [False, True])
def test_the_d256_path_matches_float64(n, causal):
    _hopper_or_skip()
    variant = get_family("attention").variants["cuda_hopper"]
    attend = lambda case: variant.build(case)()  # noqa: E731
    assert_attention_matches_float64("cuda_hopper D256", 256, n, causal, attend)


# Schedule-only meta-parameters: each changes when or where an instruction runs, never what it
# computes (the max of a set does not depend on the order of its chains), so each must give the
# default's bits. UNIFORM_WG=0 derives the warpgroup index per thread; PINGPONG 0 and 1 drop or keep
# the consumers' turns; V_WAIT_LATE=0 waits for V before issuing S; V_LAG=0 loads K and V together;
# SOFTMAX_FENCE 0 and 1 leave ptxas free to hoist the P V wait above the softmax or keep it after at
# every head dim.
# MAX_CHAINS is D=128's chain count, MAX_CHAINS_D64 D=64's.
SCHEDULE_CONFIGS = [
    {"UNIFORM_WG": 0},
    {"MAX_CHAINS": 1, "MAX_CHAINS_D64": 4},
    {"MAX_CHAINS": 2, "MAX_CHAINS_D64": 2},
    {"MAX_CHAINS": 8, "MAX_CHAINS_D64": 8},
    {"PINGPONG": 0},
    {"PINGPONG": 1},
    {"V_WAIT_LATE": 0},
    {"SOFTMAX_FENCE": 0},
    {"SOFTMAX_FENCE": 1},
    {"V_LAG": 0},
    {"PERSISTENT": 0},
]


@pytest.mark.parametrize("config", SCHEDULE_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
def test_a_schedule_meta_parameter_changes_no_bit(d, causal, config):
    # 3 x 70 heads: more tiles than SMs, so the persistent CTAs walk (and claim) several each.
    _hopper_or_skip()
    family = get_family("attention")
    params = {"B": 3, "H": 70, "N": 777, "D": d, "causal": causal}
    case = family.build_case("custom", params, "bf16", torch.device("cuda"), seed=d)
    variant = family.variants["cuda_hopper"]
    default = variant.build(case)().clone()
    changed = variant.build(case, config={**cuda.HOPPER_CUDA_CONFIG, **config})()
    assert torch.equal(default, changed)


# The choice FlashAttention-4 makes differently at D=256 (no turns between the consumers) and the
# fence, over 80-key tiles with a ragged last one.
@pytest.mark.parametrize("config", [{"PINGPONG": 0}, {"SOFTMAX_FENCE": 1}], ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_a_d256_schedule_meta_parameter_changes_no_bit(causal, config):
    _hopper_or_skip()
    family = get_family("attention")
    params = {"B": 2, "H": 70, "N": 777, "D": 256, "causal": causal}
    case = family.build_case("custom", params, "bf16", torch.device("cuda"), seed=256)
    variant = family.variants["cuda_hopper"]
    default = variant.build(case)().clone()
    changed = variant.build(case, config={**cuda.HOPPER_CUDA_CONFIG, **config})()
    assert torch.equal(default, changed)


# More (query block, head) tiles than an H100 or H200 has SMs, with a ragged last block: a
# persistent CTA walks several tiles, so its Q buffers, K/V ring phases and consumer turns run on
# from one tile into the next. STAGES_D128=3 leaves room for one Q buffer only (the other path).
# Causal CTAs claim tiles through an atomic counter, over head groups sized to L2 (at these shapes
# the last group is partial); 20 more calls check that each launch leaves the counter at zero.
PERSISTENT_SHAPES = [
    (64, 777, {}),
    (128, 777, {}),
    (128, 300, {"STAGES_D128": 3}),
    (64, 1, {}),
    (256, 777, {}),
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d,n,extra", PERSISTENT_SHAPES)
def test_the_persistent_kernel_matches_float64_and_one_cta_a_tile(d, n, extra, causal):
    _hopper_or_skip()
    family = get_family("attention")
    variant = family.variants["cuda_hopper"]
    params = {"B": 3, "H": 70, "N": n, "D": d, "causal": causal}
    blocks = -(-n // (192 if d == 64 else 128))
    assert blocks * 3 * 70 > torch.cuda.get_device_properties(0).multi_processor_count
    persistent = {**cuda.HOPPER_CUDA_CONFIG, **extra, "PERSISTENT": 1}
    for dtype in ("bf16", "fp16"):
        case = family.build_case("custom", params, dtype, torch.device("cuda"), seed=n + d)
        walked = variant.build(case, config=persistent)().clone()
        one_each = variant.build(case, config={**persistent, "PERSISTENT": 0})()
        torch.cuda.synchronize()
        verdict = check(family, dtype, walked, family.reference(case.inputs, params))
        assert verdict.passed, f"persistent D={d} N={n} causal={causal} {dtype}: {verdict.message}"
        assert torch.equal(walked, one_each)
    assert_repeatable(variant.build(case, config=persistent))


@pytest.mark.parametrize("d", [64, 128])
def test_wgmma_attention_is_deterministic_and_leaves_no_state(d):
    # Two calls on the same inputs give identical bits: no race between the producer's ring and
    # the consumers (a stage refilled too early would change the second call's result).
    _hopper_or_skip()
    family = get_family("attention")
    params = {"B": 4, "H": 8, "N": 2048, "D": d, "causal": True}
    case = family.build_case("custom", params, "bf16", torch.device("cuda"), seed=7)
    run = family.variants["cuda_hopper"].build(case)
    first = run().clone()
    second = run()
    torch.cuda.synchronize()
    assert torch.equal(first, second)


# ------------------------------------------------------------- the Triton kernel (triton_hopper)


@pytest.mark.parametrize("n", [1, 130, 777, 1024])
@pytest.mark.parametrize("key", sorted(hopper.DEFAULT_CONFIGS), ids=lambda k: f"D{k[0]}-{'c' if k[1] else 'nc'}")
def test_triton_hopper_defaults_match_float64(key, n):
    # Every default config (warp-specialized ones build their TMA descriptors in the kernel, a path
    # the CPU interpreter runs without the producer/consumer split) on ragged and whole-tile N, both
    # dtypes. A three-stage warp-specialized config once returned inf here: never a default.
    _hopper_or_skip()
    d, causal = key
    label = f"triton_hopper {hopper.DEFAULT_CONFIGS[key].label}"

    def attend(case):
        return hopper.prepare(case["q"], case["k"], case["v"], causal)()

    assert_attention_matches_float64(label, d, n, causal, attend)


@pytest.mark.parametrize("n", [130, 777])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "d,config",
    [(d, c) for d, configs in hopper.SWEEP_CANDIDATES.items() for c in configs if c.qk_ahead],
    ids=lambda x: x.label if isinstance(x, hopper.AttentionConfig) else f"D{x}",
)
def test_triton_hopper_qk_ahead_matches_float64(d, config, n, causal):
    # Q K^T of the next tile issued ahead of this tile's softmax: its last one reads past the head.
    _hopper_or_skip()

    def attend(case):
        return hopper.prepare(case["q"], case["k"], case["v"], causal, config=config)()

    assert_attention_matches_float64(f"triton_hopper {config.label}", d, n, causal, attend)


def test_triton_hopper_warp_specialized_is_repeatable():
    # 20 calls give identical bits: the producer warpgroup never refills a stage a consumer still reads.
    _hopper_or_skip()
    family = get_family("attention")
    params = {"B": 4, "H": 8, "N": 2048, "D": 128, "causal": False}
    case = family.build_case("custom", params, "bf16", torch.device("cuda"), seed=11)
    run = hopper.prepare(case["q"], case["k"], case["v"], False)
    assert run.config.warp_specialize, run.config.label
    assert_repeatable(run)
