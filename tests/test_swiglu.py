"""swiglu: the Triton kernel in the interpreter against float64 over odd sizes and every dtype, the
PyTorch forms, the cost model, and the Liger adapter against a fake with Liger's signature."""

from __future__ import annotations

import pytest
import torch
from fake_libraries import install
from kernel_checks import assert_variant_matches_reference

from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.swiglu import triton as swiglu_triton


# 1 element, odd sizes, exactly one block, one past it, and several blocks with a tail.
@pytest.mark.parametrize("rows,inter", [(1, 1), (3, 7), (1, 2048), (1, 2049), (5, 5001)])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_triton_matches_float64(rows, inter, dtype):
    assert_variant_matches_reference("swiglu", "triton", {"rows": rows, "inter": inter, "hidden": 0}, dtype)


# The projected form: the kernel reads the two column halves of x Wᵀ, whose rows are 2 * inter apart.
@pytest.mark.parametrize("rows,inter,hidden", [(1, 1, 1), (7, 33, 16), (3, 2049, 8)])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_triton_after_the_projection_matches_float64(rows, inter, hidden, dtype):
    assert_variant_matches_reference("swiglu", "triton", {"rows": rows, "inter": inter, "hidden": hidden}, dtype)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_small_blocks_cover_every_element(dtype):
    family = get_family("swiglu")
    params = {"rows": 3, "inter": 333, "hidden": 0}
    case = family.build_case("custom", params, dtype, torch.device("cpu"))
    out = torch.full_like(case["gate"], float("nan"))  # an element left unwritten fails the check
    swiglu_triton.triton_swiglu(case["gate"], case["up"], out, block=64)
    verdict = check(family, dtype, out, family.reference(case.inputs, params))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("variant", ["eager", "compile"])
@pytest.mark.parametrize("hidden", [0, 24])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_torch_variants_match_float64(variant, hidden, dtype):
    assert_variant_matches_reference("swiglu", variant, {"rows": 17, "inter": 300, "hidden": hidden}, dtype)


def test_large_inputs_do_not_saturate_the_sigmoid():
    # silu(g) = g / (1 + exp(-g)): exp(-g) overflows to inf for g < -88 in fp32, which must give 0, not NaN.
    gate = torch.tensor([-200.0, -90.0, 0.0, 90.0, 200.0])
    up = torch.ones(5)
    out = swiglu_triton.triton_swiglu(gate[None], up[None], torch.empty(1, 5))[0]
    assert torch.allclose(out, torch.tensor([0.0, 0.0, 0.0, 90.0, 200.0]), atol=1e-30)


def test_cost_of_the_two_forms():
    cost = get_family("swiglu").cost
    alone = cost({"rows": 8192, "inter": 14336, "hidden": 0}, "bf16")
    assert alone.bytes == 3 * 8192 * 14336 * 2  # read gate and up, write out
    projected = cost({"rows": 8192, "inter": 14336, "hidden": 4096}, "bf16")
    assert projected.tensor_flops == 2 * 8192 * 4096 * 2 * 14336
    # the floor keeps gate and up on chip: read x and W, write out
    assert projected.bytes == (8192 * 4096 + 2 * 14336 * 4096 + 8192 * 14336) * 2


@pytest.mark.parametrize("hidden", [0, 16])
def test_the_liger_adapter_calls_liger_swiglu_with_gate_then_up(monkeypatch, hidden):
    install(
        monkeypatch,
        "liger_kernel.transformers.functional",
        liger_swiglu=lambda a, b: (torch.nn.functional.silu(a.float()) * b.float()).to(a.dtype),
    )
    family = get_family("swiglu")
    params = {"rows": 4, "inter": 50, "hidden": hidden}
    case = family.build_case("custom", params, "bf16", torch.device("cpu"))
    verdict = check(family, "bf16", family.variants["liger"].build(case)(), family.reference(case.inputs, params))
    assert verdict.passed, verdict.message
