import pytest
import torch
from kernel_checks import assert_variant_matches_reference

from rooflint.core.family import Cost
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.softmax.triton import MAX_FUSED_COLS, triton_softmax


@pytest.mark.parametrize("cols", [1, 1000, 4097])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_triton_softmax_matches_reference(cols, dtype):
    assert_variant_matches_reference("softmax", "triton", {"rows": 3, "cols": cols}, dtype)


def test_triton_softmax_widest_register_row():
    # 20000 columns pad to a 32768-wide block: the widest row kept in registers.
    assert 20000 <= MAX_FUSED_COLS
    assert_variant_matches_reference("softmax", "triton", {"rows": 2, "cols": 20000}, "bf16")


def test_kernels_refuse_strided_input():
    with pytest.raises(ValueError, match="contiguous"):
        triton_softmax(torch.randn(8, 4).t())


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_triton_softmax_wide_row_takes_looped_path(dtype):
    assert 70000 > MAX_FUSED_COLS  # the preset routing sends this row to the two-pass kernel
    assert_variant_matches_reference("softmax", "triton", {"rows": 2, "cols": 70000}, dtype)


@pytest.mark.parametrize("cols", [1, 1000, 4097])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_triton_looped_path_forced_on_narrow_rows(cols, dtype):
    # 256-column chunks: several online-rescale steps per row and a ragged last chunk.
    family = get_family("softmax")
    params = {"rows": 3, "cols": cols}
    case = family.build_case("custom", params, dtype, torch.device("cpu"), seed=1)
    out = triton_softmax(case["x"], max_fused_cols=0, loop_block=256, num_warps=4)
    verdict = check(family, dtype, out, family.reference(case.inputs, params))
    assert verdict.passed, verdict.message


def test_triton_looped_path_survives_a_growing_max():
    # Ascending rows make the running max grow at every chunk, so every rescale matters.
    x = torch.linspace(-20.0, 20.0, 3000).repeat(2, 1)
    out = triton_softmax(x, max_fused_cols=0, loop_block=128, num_warps=4)
    torch.testing.assert_close(out.double(), torch.softmax(x.double(), dim=-1), rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("variant", ["eager_unfused", "eager"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_eager_variants_match_reference(variant, dtype):
    assert_variant_matches_reference("softmax", variant, {"rows": 5, "cols": 333}, dtype)


@pytest.mark.parametrize("variant", ["compile_unfused", "compile_max", "compile_builtin"])
def test_compile_forms_match_reference(variant):
    assert_variant_matches_reference("softmax", variant, {"rows": 5, "cols": 333}, "fp32")


def test_compile_max_form_matches_reference_in_bf16():
    assert_variant_matches_reference("softmax", "compile_max", {"rows": 5, "cols": 333}, "bf16")


def test_compile_rows_cover_each_natural_spelling():
    # amax and max().values compile to kernels 1.5x apart on an H100; the builtin is a third form.
    family = get_family("softmax")
    compiled = {v.name for v in family.variants.values() if v.kind == "compile"}
    assert compiled == {"compile_unfused", "compile_max", "compile_builtin"}
    assert family.baseline is family.variants["eager"]


def test_cost_counts_five_flops_one_read_one_write():
    assert get_family("softmax").cost({"rows": 3, "cols": 1000}, "bf16") == Cost(cuda_flops=15000, bytes=12000)
    assert get_family("softmax").cost({"rows": 1, "cols": 10}, "fp32").bytes == 80


def test_unfused_modeled_bytes_count_five_kernels():
    params = {"rows": 3, "cols": 1000}
    # n = 3000 bf16 elements (6000 bytes): amax 1 pass, sub 2, exp 2, sum 1, div 2 = 8 passes,
    # plus four row-vector (6-byte) terms: maxima written and read, sums written and read.
    assert get_family("softmax").variants["eager_unfused"].modeled_bytes(params, "bf16") == 8 * 6000 + 4 * 6
