import pytest
import torch
from kernel_checks import assert_variant_matches_reference

from rooflint.core.family import Cost
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.gelu.triton import triton_gelu

SHAPES = [(1, 1), (3, 1000), (5, 4097), (2, 70000)]


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_triton_gelu_matches_reference(rows, cols, dtype):
    assert_variant_matches_reference("gelu", "triton", {"rows": rows, "cols": cols}, dtype)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_triton_gelu_small_tiles_cover_row_and_column_tails(dtype):
    # 3x3 tiles over [7, 1000]: partial tiles in both dimensions, bias indexed per tile.
    family = get_family("gelu")
    params = {"rows": 7, "cols": 1000}
    case = family.build_case("custom", params, dtype, torch.device("cpu"), seed=3)
    out = triton_gelu(case["x"], case["bias"], case["scale"], block_r=2, block_c=128, num_warps=4)
    verdict = check(family, dtype, out, family.reference(case.inputs, params))
    assert verdict.passed, verdict.message


def test_kernels_refuse_strided_input():
    with pytest.raises(ValueError, match="contiguous"):
        triton_gelu(torch.randn(8, 4).t(), torch.randn(8), 2.0)
    with pytest.raises(ValueError, match="bias"):
        triton_gelu(torch.randn(4, 8), torch.randn(4), 2.0)


@pytest.mark.parametrize("variant", ["eager_unfused", "eager"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_eager_variants_match_reference(variant, dtype):
    assert_variant_matches_reference("gelu", variant, {"rows": 5, "cols": 333}, dtype)


@pytest.mark.parametrize("variant", ["compile_unfused", "compile_builtin"])
def test_compile_forms_match_reference(variant):
    assert_variant_matches_reference("gelu", variant, {"rows": 5, "cols": 333}, "fp32")
    compiled = {v.name for v in get_family("gelu").variants.values() if v.kind == "compile"}
    assert compiled == {"compile_unfused", "compile_builtin"}


def test_reference_is_the_tanh_formula():
    x = torch.tensor([[-3.0, -0.5, 0.0, 0.5, 3.0]])
    bias = torch.tensor([1.0, 0.0, -1.0, 0.25, 0.0])
    got = get_family("gelu").reference({"x": x, "bias": bias, "scale": 2.0}, {"rows": 1, "cols": 5})
    expected = (torch.nn.functional.gelu(x.double(), approximate="tanh") + bias.double()) * 2.0
    torch.testing.assert_close(got, expected)


def test_cost_counts_eleven_flops_and_one_pass():
    # n = 3000: 11 FLOPs each; bytes = read x (6000) + read bias (2000) + write y (6000).
    assert get_family("gelu").cost({"rows": 3, "cols": 1000}, "bf16") == Cost(cuda_flops=33000, bytes=14000)
    assert get_family("gelu").cost({"rows": 2, "cols": 10}, "fp32").bytes == 80 + 40 + 80


def test_modeled_bytes_count_every_kernel_trip():
    variants = get_family("gelu").variants
    params = {"rows": 3, "cols": 1000}
    # 8 GELU kernels (18 full-tensor passes) + bias add (2) + scale (2), plus the bias read.
    assert variants["eager_unfused"].modeled_bytes(params, "bf16") == 22 * 6000 + 2000
    # F.gelu, + bias, * scale: 3 kernels of 2 passes each.
    assert variants["eager"].modeled_bytes(params, "bf16") == 6 * 6000 + 2000
