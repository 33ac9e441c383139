import pytest
import torch
import torch.nn.functional as F
from kernel_checks import assert_variant_matches_reference

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import Cost
from rooflint.core.registry import get_family

# (m, k, n): TMA needs 16-byte row strides, so K and N are multiples of 8 while M stays odd. A
# single output row; a K tail (72 % 32 != 0) with M and N tails; whole K slices; several K slices
# with a tail. Under the interpreter 3 programs stride over the tiles (4 and 6 tiles here), so the
# persistent loop's second pass is checked too.
SHAPES = [(1, 8, 8), (37, 72, 48), (33, 64, 72), (64, 200, 96)]


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_triton_gelu_linear_matches_reference(m, k, n, dtype):
    assert_variant_matches_reference("gelu_linear", "triton", {"m": m, "k": k, "n": n}, dtype)


@pytest.mark.parametrize("m,k,n", [(4, 12, 8), (4, 8, 12)])
def test_triton_refuses_rows_tma_cannot_address(m, k, n):
    family = get_family("gelu_linear")
    case = family.build_case("custom", {"m": m, "k": k, "n": n}, "bf16", torch.device("cpu"))
    with pytest.raises(VariantSkipped, match="multiples of 8"):
        family.variants["triton"].build(case)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_eager_unfused_matches_reference(dtype):
    assert_variant_matches_reference("gelu_linear", "eager_unfused", {"m": 20, "k": 48, "n": 30}, dtype)


def test_fp32_is_not_offered():
    # A decision, not an omission: fp32 GEMMs run either on CUDA cores or silently in TF32.
    family = get_family("gelu_linear")
    assert family.dtypes == ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")  # fp8: tests/test_gelu_linear_fp8.py
    assert family.tensor_precision("bf16") == "bf16"


def test_reference_is_tanh_gelu_of_the_affine_map():
    x = torch.tensor([[1.0, -2.0]], dtype=torch.float16)
    w = torch.tensor([[0.5, 0.25], [-1.0, 0.0], [0.0, 0.0]], dtype=torch.float16)
    b = torch.tensor([0.0, 1.0, -3.0], dtype=torch.float16)
    got = get_family("gelu_linear").reference({"x": x, "w": w, "b": b}, {"m": 1, "k": 2, "n": 3})
    z = torch.tensor([[0.0, 0.0, -3.0]], dtype=torch.float64)  # 0.5-0.5+0, -1+1, 0-3
    assert torch.allclose(got, F.gelu(z, approximate="tanh"))
    assert got[0, 2] < 0 and got[0, 2] > -0.01  # GELU(-3) is a small negative number


def test_bf16_tolerance_holds_at_k_8192_with_fp32_accumulation():
    # What a correct kernel does at the large shape's K: bf16 inputs, fp32 accumulation, one
    # rounding of Y to bf16. Its error must sit well inside the tolerance, or the gate is too tight.
    family = get_family("gelu_linear")
    params = {"m": 4, "k": 8192, "n": 64}
    case = family.build_case("custom", params, "bf16", torch.device("cpu"), seed=1)
    x, w, b = case["x"].float(), case["w"].float(), case["b"].float()
    out = F.gelu(x @ w.t() + b, approximate="tanh").to(torch.bfloat16)
    error = torch.linalg.vector_norm(out.double() - family.reference(case.inputs, params))
    relative = (error / torch.linalg.vector_norm(family.reference(case.inputs, params))).item()
    assert relative < family.tolerances["bf16"] / 4


def test_cost_separates_tensor_and_epilogue_flops():
    # m=2, k=3, n=4: 2*2*4*3 = 48 MMA FLOPs; 8 outputs x (1 bias add + 9 GELU) = 80 epilogue FLOPs;
    # bytes in bf16: X 6 + W 12 + b 4 elements read, Y 8 written = 30 elements = 60 bytes.
    assert get_family("gelu_linear").cost({"m": 2, "k": 3, "n": 4}, "bf16") == Cost(
        tensor_flops=48, cuda_flops=80, bytes=60
    )
    # GPT-2 MLP: 2 * 1024 * 3072 * 768 = 4.83 GFLOP on the tensor cores.
    assert get_family("gelu_linear").cost({"m": 1024, "k": 768, "n": 3072}, "fp16").tensor_flops == 4831838208


def test_unfused_variants_model_the_extra_round_trip_of_y():
    variants = get_family("gelu_linear").variants
    params = {"m": 2, "k": 3, "n": 4}
    # 60 ideal bytes + F.gelu reading and rewriting the 8-element Y (2 * 8 * 2 bytes).
    assert variants["eager_unfused"].modeled_bytes(params, "bf16") == 92
    assert variants["compile_unfused"].modeled_bytes(params, "bf16") == 92


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_compile_unfused_matches_reference(dtype):
    assert_variant_matches_reference("gelu_linear", "compile_unfused", {"m": 20, "k": 48, "n": 30}, dtype)


def test_fused_epilogue_rows_are_cuda_only_and_eager_is_the_baseline():
    # On CPU torch._addmm_activation applies the erf GELU, not this family's tanh GELU: off a GPU
    # both rows that call it must skip rather than fail the check.
    family = get_family("gelu_linear")
    assert family.baseline is family.variants["eager"]
    for name in ("eager", "compile_builtin"):
        assert "cuda" in family.variants[name].needs
    assert {v.name for v in family.variants.values() if v.kind == "compile"} == {"compile_unfused", "compile_builtin"}


def test_compile_builtin_compiles_the_same_op_as_eager():
    # Compared with the op itself on CPU (erf GELU there): torch.compile falls back to aten's
    # _addmm_activation, so the compiled row times the fused built-in, not a rewrite of it.
    from rooflint.kernels import gelu_linear

    family = get_family("gelu_linear")
    case = family.build_case("custom", {"m": 8, "k": 16, "n": 24}, "bf16", torch.device("cpu"))
    x, w, b = case["x"], case["w"], case["b"]
    compiled = family.variants["compile_builtin"].build(case)()
    torch.testing.assert_close(compiled, gelu_linear.fused_epilogue(x, w, b), rtol=0, atol=0)
