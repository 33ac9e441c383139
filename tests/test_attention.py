import math

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import assert_variant_matches_reference

from rooflint.core.errors import UserError
from rooflint.core.family import Cost
from rooflint.core.registry import get_family
from rooflint.kernels import attention
from rooflint.kernels.attention.cuda import cuda_variant
from rooflint.kernels.attention.triton import triton_attention


# N=1 (one key), 17 (one tile plus a one-row tail), 64 (whole tiles), 50 (several tiles plus a tail).
# The interpreter runs 16 x 16 tiles (kernels/attention/triton.py): 50 is three whole tiles and a
# ragged one, the path a longer N takes too, at a fifth of N=130's tile pairs.
@pytest.mark.parametrize("n", [1, 17, 64, 50])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_triton_attention_matches_reference(n, d, causal, dtype):
    assert_variant_matches_reference("attention", "triton", {"B": 1, "H": 2, "N": n, "D": d, "causal": causal}, dtype)


@pytest.mark.parametrize("causal", [False, True])
def test_triton_attention_separates_batches_and_heads(causal):
    # Several (batch, head) programs with distinct data: a wrong head offset mixes them up.
    assert_variant_matches_reference(
        "attention", "triton", {"B": 2, "H": 3, "N": 33, "D": 64, "causal": causal}, "bf16"
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_triton_attention_reads_qkv_views_and_writes_token_major_rows_in_place(causal, dtype):
    """A model's layout: q, k, v are views of one fused [B, N, 3, H, D] QKV output, and O goes straight
    into a [B, N, H, D] buffer, so [B*N, H*D] is a view. Nothing is copied; batches and heads stay apart."""
    b, n, h, d = 2, 37, 3, 64
    qkv = torch.randn(b, n, 3, h, d, generator=torch.Generator().manual_seed(5)).to(dtype)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # [B, H, N, D], strided
    out = torch.full((b, n, h, d), float("nan"), dtype=dtype)
    got = triton_attention(q, k, v, causal, out.transpose(1, 2))
    assert got.data_ptr() == out.data_ptr() and not torch.isnan(out).any()
    inputs = {"q": q.contiguous(), "k": k.contiguous(), "v": v.contiguous()}
    want = attention.reference(inputs, {"B": b, "H": h, "N": n, "D": d, "causal": causal})
    tol = 2e-3 if dtype == torch.float16 else 1.6e-2
    assert torch.allclose(out.transpose(1, 2).double(), want, atol=tol, rtol=tol)


@pytest.mark.parametrize("variant", ["eager", "eager_unfused"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_pytorch_variants_match_reference(variant, causal, dtype):
    assert_variant_matches_reference("attention", variant, {"B": 2, "H": 2, "N": 70, "D": 64, "causal": causal}, dtype)


@pytest.mark.parametrize("variant", ["compile_unfused", "compile_builtin", "sdpa_math"])
@pytest.mark.parametrize("causal", [False, True])
def test_compiled_and_math_backend_rows_match_reference(variant, causal):
    assert_variant_matches_reference("attention", variant, {"B": 1, "H": 2, "N": 70, "D": 64, "causal": causal}, "bf16")


def test_every_sdpa_backend_is_its_own_eager_row_after_the_baseline():
    family = get_family("attention")
    order = [v.name for v in family.ordered_variants()]
    assert order[0] == "eager" and family.baseline is family.variants["eager"]
    assert {"sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math"} <= {
        v.name for v in family.variants.values() if v.kind == "eager"
    }
    assert family.variants["sdpa_math"].needs == ()  # the math path runs anywhere
    assert {v.name for v in family.variants.values() if v.kind == "compile"} == {"compile_unfused", "compile_builtin"}


def test_a_backend_that_cannot_take_the_inputs_is_skipped_with_the_reason():
    # On CPU SDPA has no cuDNN backend: pinned to it, the variant must skip, not error.
    from rooflint.core.errors import VariantSkipped
    from rooflint.kernels.common import sdpa as sdpa_backends

    family = get_family("attention")
    params = {"B": 1, "H": 1, "N": 16, "D": 64, "causal": False}
    case = family.build_case("custom", params, "bf16", torch.device("cpu"))
    with pytest.raises(VariantSkipped, match="cudnn_attention backend does not take these inputs"):
        sdpa_backends.pinned("CUDNN_ATTENTION", attention._sdpa_call)(case)
    run = sdpa_backends.pinned("MATH", attention._sdpa_call)(case)
    assert run.note == "SDPA backend: math (pinned)"


def test_causal_mask_changes_the_output():
    family = get_family("attention")
    params = {"B": 1, "H": 1, "N": 40, "D": 64, "causal": False}
    case = family.build_case("custom", params, "fp16", torch.device("cpu"))
    full = family.reference(case.inputs, params)
    causal = family.reference(case.inputs, {**params, "causal": True})
    # The last query sees every key either way; the first sees only itself under the mask.
    assert torch.allclose(full[..., -1, :], causal[..., -1, :])
    assert torch.allclose(causal[..., 0, :], case["v"][..., 0, :].double())
    assert not torch.allclose(full[..., 0, :], causal[..., 0, :])


@pytest.mark.parametrize("causal", [False, True])
def test_chunked_reference_equals_sdpa_in_float64(monkeypatch, causal):
    family = get_family("attention")
    params = {"B": 2, "H": 3, "N": 48, "D": 64, "causal": causal}
    case = family.build_case("custom", params, "bf16", torch.device("cpu"))
    monkeypatch.setattr(attention, "REFERENCE_CHUNK_SCORES", 2 * 48 * 48)  # two heads a chunk: 3 chunks
    q, k, v = (case[name].double() for name in ("q", "k", "v"))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert torch.allclose(family.reference(case.inputs, params), expected, rtol=1e-12, atol=1e-12)


def test_cost_counts_tensor_flops_and_one_pass_of_bytes():
    family = get_family("attention")
    params = {"B": 1, "H": 2, "N": 130, "D": 64, "causal": False}
    # 4 * B*H * N^2 * D FLOPs; q, k, v read and o written: 4 * B*H*N*D elements of 2 bytes.
    assert family.cost(params, "bf16") == Cost(tensor_flops=4 * 2 * 130 * 130 * 64, bytes=4 * 2 * 130 * 64 * 2)
    assert family.cost({**params, "causal": True}, "fp16").tensor_flops == 2 * 2 * 130 * 130 * 64
    large = family.cost(family.sizes["large"][0], "bf16")
    assert large.tensor_flops == 4 * 4 * 32 * 4096**2 * 128 and large.bytes == 4 * 128 * 2**20


def test_unfused_traffic_counts_every_pass_over_the_scores():
    params = {"B": 1, "H": 2, "N": 100, "D": 64, "causal": False}
    scores = 2 * 100 * 100 * 2  # B*H*N^2 bf16 elements
    ideal = 4 * 2 * 100 * 64 * 2
    # write S; read+write for scale; read+write for softmax; read P: 6 passes (8 with the mask).
    assert attention.unfused_bytes(params, "bf16") == 6 * scores + ideal
    assert attention.unfused_bytes({**params, "causal": True}, "bf16") == 8 * scores + ideal


def test_sdpa_backend_name_is_reported():
    q = torch.randn(1, 2, 16, 64)
    assert attention.sdpa_backend_name(q, q, q, True) in {"flash_attention", "math", "efficient_attention"}
    family = get_family("attention")
    case = family.build_case("small", family.sizes["small"][0], "fp16", torch.device("cpu"))
    assert family.variants["eager"].build(case).note.startswith("SDPA backend: ")


def test_head_dim_outside_64_and_128_is_refused():
    with pytest.raises(UserError, match="head_dim"):
        get_family("attention").build_case("custom", {"B": 1, "H": 1, "N": 8, "D": 96, "causal": False}, "fp16", "cpu")


def test_scale_is_one_over_sqrt_head_dim():
    # Keys 0, 1, 2 (all 64 components) against a query of ones score 0, 64, 128 before scaling;
    # with one-hot values the output row is the softmax weights themselves.
    family = get_family("attention")
    q = torch.ones(1, 1, 3, 64)
    k = torch.arange(3, dtype=torch.float32).view(1, 1, 3, 1).expand(1, 1, 3, 64).contiguous()
    v = torch.eye(3).view(1, 1, 3, 3).repeat(1, 1, 1, 22)[..., :64].contiguous()
    out = family.reference({"q": q, "k": k, "v": v}, {"causal": False})
    weights = torch.softmax(torch.arange(3, dtype=torch.float64) * 64 / math.sqrt(64), 0)
    assert torch.allclose(out[0, 0, 0, :3], weights)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_triton_attention_at_head_dim_256(causal, dtype):
    # The large size's D=256 rows (issue 14): the portable kernel takes them; its autotuner has
    # tiles small enough for D=256 on a GPU, the interpreter runs its one small tile.
    assert_variant_matches_reference(
        "attention", "triton", {"B": 1, "H": 2, "N": 70, "D": 256, "causal": causal}, dtype
    )


def test_large_size_reports_head_dims_64_and_256_and_a_long_sequence():
    shapes = get_family("attention").sizes["large"]
    assert {s["D"] for s in shapes} == {64, 128, 256}
    assert any(s["N"] == 16384 and s["causal"] for s in shapes)
    for d in (64, 256):  # both masks at each head dim
        assert {s["causal"] for s in shapes if s["D"] == d} == {False, True}


def test_cuda_attention_skips_a_head_dim_it_is_not_built_for(monkeypatch):
    from rooflint.core.errors import VariantSkipped

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))

    class Case(dict):
        params = {"B": 1, "H": 2, "N": 64, "D": 256, "causal": False}

    with pytest.raises(VariantSkipped, match="head_dim 64 or 128"):
        cuda_variant(Case())


def test_unfused_attention_says_when_its_scores_do_not_fit():
    # N=16384, 32 heads, bf16: three 16 GiB score tensors
    assert "need 48 GiB; 40 GiB are free" in attention.scores_shortfall((1, 32, 16384, 128), 2, 40 * 2**30)
    assert attention.scores_shortfall((1, 32, 16384, 128), 2, 79 * 2**30) is None


def test_sdpa_math_skips_where_its_fp32_scores_do_not_fit(monkeypatch):
    # The math backend keeps the scores in fp32: 96 GiB for N=16384 with 32 heads, more than an
    # 80 GB H100 has free (it ran out of memory there), less than an H200's 139.
    from rooflint.core.errors import VariantSkipped

    class Query:  # what the check reads of q: a CUDA device, the shape, 2-byte elements
        device, shape = torch.device("cuda"), (1, 32, 16384, 128)

        def element_size(self):
            return 2

    q = Query()
    free = {"bytes": 79 * 2**30}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["bytes"], 80 * 2**30))

    class Case(dict):
        params = {"B": 1, "H": 32, "N": 16384, "D": 128, "causal": True}

    case = Case(q=q, k=q, v=q)
    with pytest.raises(VariantSkipped, match="need 96 GiB; 79 GiB are free"):
        attention._sdpa_math_call(case)
    free["bytes"] = 139 * 2**30
    assert callable(attention._sdpa_math_call(case))
