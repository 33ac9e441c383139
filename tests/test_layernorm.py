import pytest
import torch
from kernel_checks import assert_variant_matches_reference

from rooflint.core.family import Cost
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels import layernorm as ln
from rooflint.kernels.layernorm.triton import ROW_CONFIG, triton_layernorm

# hidden 1 (var 0: y = b), odd widths (unaligned rows), 256 (a whole tile: the unmasked path),
# 4097 (just past a power of two) and 70001 (wider than one register tile: the looped kernel).
SHAPES = [(3, 1), (5, 7), (6, 256), (4, 1000), (3, 4097), (2, 70_001)]
FAMILIES = ["layernorm", "layernorm_gelu"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("rows,hidden", SHAPES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_triton_matches_reference(family, rows, hidden, dtype):
    assert_variant_matches_reference(family, "triton", {"rows": rows, "hidden": hidden}, dtype)


@pytest.mark.parametrize("config", [{"W_FIRST": 1}, {"EVICT": 1}, {"W_FIRST": 1, "EVICT": 1, "num_warps": 2}])
@pytest.mark.parametrize("rows,hidden", [(5, 7), (6, 256), (4, 1000)])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_each_ab_config_matches_reference_and_the_default_bits(rows, hidden, dtype, config):
    # `rooflint ab layernorm -V triton --config ...` runs these (256: the unmasked EVEN path): where w
    # and b load and the eviction hints move no arithmetic, so each gives the default's bits too.
    family = get_family("layernorm")
    params = {"rows": rows, "hidden": hidden}
    case = family.build_case("custom", params, dtype, torch.device("cpu"), seed=rows + hidden)
    y, mean, rstd = family.variants["triton"].build(case, config={**ROW_CONFIG, **config})()
    verdict = check(family, dtype, (y, mean, rstd), family.reference(case.inputs, params))
    assert verdict.passed, verdict.message
    default = family.variants["triton"].build(case)()
    for got, want in zip((y, mean, rstd), default, strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("gelu", [False, True])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_looped_kernel_matches_reference(gelu, dtype):
    # A 256-wide tile sends 1000 columns through the looped kernel: 3 full tiles and a partial one.
    family = get_family("layernorm_gelu" if gelu else "layernorm")
    params = {"rows": 6, "hidden": 1000}
    case = family.build_case("custom", params, dtype, torch.device("cpu"))
    x, w, b = case["x"], case["weight"], case["bias"]
    y, mean, rstd = torch.empty_like(x), torch.empty(6), torch.empty(6)
    triton_layernorm(x, w, b, y, mean, rstd, gelu=gelu, max_block=256)
    output = y if gelu else (y, mean, rstd)
    verdict = check(family, dtype, output, family.reference(case.inputs, params))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("max_block", [256, None])
def test_statistics_stay_accurate_far_from_zero(max_block):
    # |mean| = 100 std: a one-pass E[x^2] - E[x]^2 in fp32 is off by ~6e-4 here, 60x the tolerance.
    family = get_family("layernorm")
    params = {"rows": 4, "hidden": 1000}
    case = family.build_case("custom", params, "fp32", torch.device("cpu"))
    case.inputs["x"] = case["x"] + 100.0
    x, w, b = case["x"], case["weight"], case["bias"]
    y, mean, rstd = torch.empty_like(x), torch.empty(4), torch.empty(4)
    triton_layernorm(x, w, b, y, mean, rstd, max_block=max_block)
    verdict = check(family, "fp32", (y, mean, rstd), family.reference(case.inputs, params))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("variant", ["eager", "eager_unfused"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_torch_variants_match_reference(family, variant, dtype):
    assert_variant_matches_reference(family, variant, {"rows": 33, "hidden": 1000}, dtype)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("variant", ["compile_unfused", "compile_builtin"])
def test_compile_forms_match_reference(family, variant):
    assert_variant_matches_reference(family, variant, {"rows": 4, "hidden": 8}, "fp32")


@pytest.mark.parametrize("family", FAMILIES)
def test_compile_rows_cover_the_unfused_and_the_builtin_form(family):
    variants = get_family(family).variants.values()
    assert {v.name for v in variants if v.kind == "compile"} == {"compile_unfused", "compile_builtin"}
    assert get_family(family).baseline.name == "eager"


def test_tolerance_catches_unbiased_variance_in_bf16_stats():
    # rstd from the n-1 variance is off by 1/(2n); at n=8 that is 6%, which must fail.
    family = get_family("layernorm")
    params = {"rows": 16, "hidden": 8}
    case = family.build_case("custom", params, "bf16", torch.device("cpu"))
    y, mean, rstd = family.reference(case.inputs, params)
    wrong = 1.0 / torch.sqrt(case["x"].double().var(dim=-1, unbiased=True) + ln.EPS)
    assert not check(family, "bf16", (y, mean, wrong), (y, mean, rstd)).passed


def test_cost_counts():
    rows, hidden = 16384, 4096
    n = rows * hidden
    layernorm = get_family("layernorm").cost({"rows": rows, "hidden": hidden}, "bf16")
    # x read and y written at 2 bytes, w and b read once, fp32 mean and rstd written.
    assert layernorm == Cost(cuda_flops=7 * n + 4 * rows, bytes=2 * n * 2 + 2 * hidden * 2 + 2 * rows * 4)
    fused = get_family("layernorm_gelu").cost({"rows": rows, "hidden": hidden}, "bf16")
    assert fused == Cost(cuda_flops=16 * n + 4 * rows, bytes=2 * n * 2 + 2 * hidden * 2)
    assert get_family("layernorm").cost({"rows": 2, "hidden": 3}, "fp32").bytes == 2 * 6 * 4 + 2 * 3 * 4 + 2 * 2 * 4


def test_modeled_bytes():
    params = {"rows": 10, "hidden": 100}
    n = 1000
    # fp32: 7 full-size kernels moving 12 n-sized fp32 tensors, 6 per-row vectors, w and b.
    unfused = get_family("layernorm").variants["eager_unfused"].modeled_bytes(params, "fp32")
    assert unfused == 12 * n * 4 + 6 * 10 * 4 + 2 * 100 * 4
    # bf16 adds the upcast (read 2, write 4 bytes) and the downcast (read 4, write 2) per element.
    assert get_family("layernorm").variants["eager_unfused"].modeled_bytes(params, "bf16") == (
        12 * n * 4 + 6 * 10 * 4 + 2 * 100 * 2 + 2 * 6 * n
    )
    # layernorm_gelu: the LayerNorm trips, 9 GELU kernels moving 21 tensors, the downcast.
    fused_unfused = get_family("layernorm_gelu").variants["eager_unfused"].modeled_bytes(params, "bf16")
    assert fused_unfused == 12 * n * 4 + 6 * 10 * 4 + 2 * 100 * 2 + 6 * n + 21 * n * 4 + 6 * n
    eager = get_family("layernorm_gelu").variants["eager"].modeled_bytes(params, "bf16")
    assert eager == 2 * n * 2 + 2 * 100 * 2 + 2 * n * 2  # y written by LayerNorm, read back by GELU
