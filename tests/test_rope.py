import pytest
import torch
from kernel_checks import assert_variant_matches_reference

from rooflint.core.errors import UserError
from rooflint.core.family import Cost
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check

# 1 of everything; odd seq/heads with head_dim 6 (half 3: no vector fits); a 64-wide head.
SHAPES = [
    {"batch": 1, "seq": 1, "heads": 1, "head_dim": 2},
    {"batch": 2, "seq": 7, "heads": 3, "head_dim": 6},
    {"batch": 2, "seq": 33, "heads": 5, "head_dim": 64},
]


@pytest.mark.parametrize("variant", ["triton_table", "triton_fused", "eager"])
@pytest.mark.parametrize("params", SHAPES, ids=lambda p: "x".join(str(v) for v in p.values()))
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_variant_matches_reference(variant, params, dtype):
    assert_variant_matches_reference("rope", variant, params, dtype)


def test_fused_form_is_accurate_at_long_positions():
    # Angles of up to 767 radians: a fast sin/cos without proper range reduction is wrong beyond a
    # few radians, and fp32's spacing at 767 (2^-14) already tests the reduction's precision.
    assert_variant_matches_reference(
        "rope", "triton_fused", {"batch": 1, "seq": 768, "heads": 1, "head_dim": 16}, "fp32"
    )


def test_convention_is_rotate_half_not_interleaved():
    family = get_family("rope")
    params = {"batch": 1, "seq": 3, "heads": 1, "head_dim": 4}
    case = family.build_case("custom", params, "fp32", torch.device("cpu"))
    q_out, _ = family.reference(case.inputs, params)
    x, a = case["q"][0, 2, 0].double(), 2.0 * 10000.0 ** torch.tensor([0.0, -0.5], dtype=torch.float64)
    # element 0 pairs with element 2 (= 0 + D/2), element 1 with element 3.
    expected_first = x[0] * torch.cos(a[0]) - x[2] * torch.sin(a[0])
    expected_last = x[3] * torch.cos(a[1]) + x[1] * torch.sin(a[1])
    assert torch.allclose(q_out[0, 2, 0, 0], expected_first)
    assert torch.allclose(q_out[0, 2, 0, 3], expected_last)


def test_check_rejects_an_interleaved_rotation():
    # The gate must tell the conventions apart: rotating adjacent pairs is a different op.
    family = get_family("rope")
    params = {"batch": 1, "seq": 16, "heads": 2, "head_dim": 8}
    case = family.build_case("custom", params, "fp32", torch.device("cpu"))
    ref = family.reference(case.inputs, params)
    cos, sin = case["cos"][:, None, :], case["sin"][:, None, :]

    def interleaved(x):
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)

    assert not check(family, "fp32", (interleaved(case["q"]), interleaved(case["k"])), ref).passed


def test_cost_counts_q_and_k_once_each_way():
    n = 2 * 3 * 4 * 8
    assert get_family("rope").cost({"batch": 2, "seq": 3, "heads": 4, "head_dim": 8}, "bf16") == Cost(
        cuda_flops=6 * n,  # 3 FLOPs per output element, q and k
        bytes=8 * n,  # q, k read and written, 2 bytes each
    )


def test_table_forms_model_the_table_and_eager_its_trips():
    family = get_family("rope")
    params = {"batch": 8, "seq": 4096, "heads": 32, "head_dim": 128}
    ideal = family.cost(params, "bf16").bytes
    assert ideal == 4 * 8 * 4096 * 32 * 128 * 2
    table = 2 * 4096 * 64 * 4  # fp32 cos and sin
    assert family.variants["triton_table"].modeled_bytes(params, "bf16") == ideal + table
    assert family.variants["cuda_table"].modeled_bytes(params, "bf16") == ideal + table
    assert family.variants["triton_fused"].modeled_bytes is None  # the fused form moves the ideal bytes
    assert family.variants["eager"].modeled_bytes(params, "bf16") == 5 * ideal + table


def test_odd_head_dim_is_a_clear_error():
    with pytest.raises(UserError, match="even head_dim"):
        get_family("rope").cost({"batch": 1, "seq": 1, "heads": 1, "head_dim": 3}, "fp32")


# On a GPU (pytest -m gpu with TRITON_INTERPRET=0), the Triton and CUDA kernels as compiled: the
# element path (half 3), 72 heads (the CUDA kernel's 256-thread blocks take two or three passes over
# a token's items), and 1,048,640 tokens, more than the CUDA grid's 1,048,560 blocks, so some blocks
# stride to a second token.
GPU_SHAPES = [
    {"batch": 2, "seq": 7, "heads": 3, "head_dim": 6},
    {"batch": 2, "seq": 9, "heads": 72, "head_dim": 128},
    {"batch": 16385, "seq": 64, "heads": 1, "head_dim": 16},
]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("variant", ["triton_table", "triton_fused", "cuda_table", "cuda_fused"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_gpu_kernels_match_reference_on_odd_shapes(variant, dtype):
    family = get_family("rope")
    failures = []
    for params in GPU_SHAPES:
        case = family.build_case("custom", params, dtype, torch.device("cuda"))
        verdict = check(family, dtype, family.variants[variant].build(case)(), family.reference(case.inputs, params))
        if not verdict.passed:
            failures.append(f"{params}: {verdict.message}")
    assert not failures, "\n".join(failures)
