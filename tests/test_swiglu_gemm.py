"""swiglu's fused GEMM (kernels/swiglu/triton_gemm.py) in Triton's interpreter against float64, and the
Llama triton set's prefill running its gate/up projection through it (the gate_up_swiglu fusion)."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import assert_variant_matches_reference
from tiny_llama import TINY_LLAMA

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.swiglu import triton_gemm
from rooflint.models import llama
from rooflint.models.base import OpRecorder, Phase, build
from rooflint.models.llama_kernels import make_llama_kernel_set
from rooflint.models.rows import total_cost

CPU = torch.device("cpu")


# (rows, inter, hidden), hidden and inter multiples of 8 (TMA's 16-byte rows): one row; M, N and K
# tails at once (the interpreter's tile is 32 x 16 x 32); whole tiles; 3 programs striding over 8
# tiles with a K tail, so the persistent loop's later passes and the up half's edge are checked.
@pytest.mark.parametrize("rows,inter,hidden", [(1, 8, 8), (37, 40, 72), (64, 32, 64), (61, 64, 200)])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_the_fused_gemm_matches_float64(rows, inter, hidden, dtype):
    assert_variant_matches_reference("swiglu", "triton_gemm", {"rows": rows, "inter": inter, "hidden": hidden}, dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_output_is_written_and_each_half_gets_its_own_bias(dtype):
    g = torch.Generator().manual_seed(3)
    rows, inter, hidden = 37, 40, 72
    x = torch.randn(rows, hidden, generator=g).to(dtype)
    w = (torch.randn(2 * inter, hidden, generator=g) * hidden**-0.5).to(dtype)
    b = torch.randn(2 * inter, generator=g).to(dtype)
    out = torch.full((rows, inter), float("nan"), dtype=dtype)  # an element left unwritten stays NaN
    triton_gemm.gemm_swiglu(x, w, b, out)
    gate, up = (x.double() @ w.double().T + b.double()).chunk(2, dim=-1)
    expected = gate * torch.sigmoid(gate) * up
    assert not out.isnan().any()
    # swapping the halves' biases would put this near 1
    assert (out.double() - expected).norm() / expected.norm() < 2e-2


def test_the_gemm_rounds_gate_and_up_as_the_unfused_form_does():
    # The unfused form rounds the GEMM's output to bf16, then the elementwise kernel takes that: the
    # fused epilogue rounds gate and up first too, so the two forms differ by at most an ulp or so.
    family = get_family("swiglu")
    case = family.build_case("custom", {"rows": 33, "inter": 48, "hidden": 64}, "bf16", CPU)
    fused = family.variants["triton_gemm"].build(case)()
    unfused = family.variants["triton"].build(case)()
    torch.testing.assert_close(fused, unfused, rtol=1.6e-2, atol=1e-2)


def test_what_the_gemm_cannot_take_is_named_in_one_line():
    x, w = torch.zeros(4, 64, dtype=torch.bfloat16), torch.zeros(96, 64, dtype=torch.bfloat16)
    assert triton_gemm.why_not(x, w) is None
    assert "TF32" in triton_gemm.why_not(x.float(), w.float())
    assert "multiples of 8" in triton_gemm.why_not(torch.zeros(4, 60, dtype=torch.bfloat16), w[:, :60])
    assert "multiples of 8" in triton_gemm.why_not(x, w[:84])  # inter 42
    assert "does not match the weight" in triton_gemm.why_not(x.half(), w)
    assert "does not match the weight" in triton_gemm.why_not(x[:, :56], w)
    assert triton_gemm.why_not_weight(w) is None and "TF32" in triton_gemm.why_not_weight(w.float())
    with pytest.raises(ValueError, match="multiples of 8"):
        triton_gemm.gemm_swiglu(x, w[:84])
    family = get_family("swiglu")
    elementwise = family.build_case("custom", {"rows": 3, "inter": 8, "hidden": 0}, "bf16", CPU)
    with pytest.raises(VariantSkipped, match="no projection to fuse into"):
        family.variants["triton_gemm"].build(elementwise)
    assert family.variants["triton_gemm"].dtypes == ("fp16", "bf16")


@pytest.fixture(scope="module")
def loaded():
    return build(llama.Llama({"tiny": TINY_LLAMA}), "tiny", torch.bfloat16, CPU, seed=0)


def test_the_triton_prefill_runs_gate_up_and_swiglu_as_one_gemm(loaded, monkeypatch):
    kernels = make_llama_kernel_set("triton", torch.bfloat16, CPU, loaded.dims.head_dim, TINY_LLAMA["rms_norm_eps"])
    assert kernels.fusions(32, False) == frozenset()  # prepare() not called: no weight to decide by
    kernels.prepare(loaded.weights)
    assert kernels.fusions(32, False) == {"gate_up_swiglu"}
    assert kernels.fusions(16, False) == frozenset()  # a decode GEMM's rows: the streaming kernels
    assert "gate_up_swiglu in prefill" in kernels.describe()

    calls = []
    gemm = triton_gemm.gemm_swiglu
    monkeypatch.setattr(triton_gemm, "gemm_swiglu", lambda x, w, b=None: calls.append(x.shape) or gemm(x, w, b))
    ids = torch.randint(0, TINY_LLAMA["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(4))
    fused = llama.SPEC.forward(loaded.weights, kernels, ids, 0, None, OpRecorder())
    assert calls == [(32, TINY_LLAMA["hidden_size"])] * TINY_LLAMA["num_hidden_layers"]

    monkeypatch.setattr(type(kernels), "_swiglu_in_prefill_gemm", lambda self, rows: False)
    unfused = llama.SPEC.forward(loaded.weights, kernels, ids, 0, None, OpRecorder())
    assert len(calls) == TINY_LLAMA["num_hidden_layers"]
    torch.testing.assert_close(fused, unfused, rtol=2e-2, atol=2e-2)


def test_sets_without_the_gemm_keep_the_swiglu_op_in_prefill(loaded):
    for name in ("eager", "compile"):
        kernels = make_llama_kernel_set(name, torch.bfloat16, CPU, loaded.dims.head_dim, 1e-5)
        kernels.prepare(loaded.weights)
        assert kernels.fusions(32, False) == frozenset(), name
    fp32 = make_llama_kernel_set("triton", torch.float32, CPU, loaded.dims.head_dim, 1e-5)
    fp32.prepare(build(llama.Llama({"tiny": TINY_LLAMA}), "tiny", torch.float32, CPU, seed=0).weights)
    assert fp32.fusions(32, False) == frozenset()  # fp32 would run the tensor cores in TF32


def test_the_fused_prefill_costs_lose_the_swiglu_op_and_the_round_trip(loaded):
    dims = loaded.dims
    prefill = Phase("prefill", 2, 1024, 1024)
    plain = llama.SPEC.op_costs(dims, prefill, "bf16")
    fused = llama.SPEC.op_costs(dims, prefill, "bf16", frozenset({"gate_up_swiglu"}))
    assert "swiglu" not in fused and "swiglu" in plain
    written = dims.layers * prefill.rows * dims.ffn * 2  # the GEMM writes [rows, ffn], not [rows, 2 ffn]
    # the swiglu op's reads of gate and up and its write are gone with the GEMM's second half
    assert total_cost(plain).bytes - total_cost(fused).bytes == written + plain["swiglu"].bytes
    assert total_cost(fused).tensor_flops == total_cost(plain).tensor_flops


def test_a_given_config_launches_that_tile():
    # `rooflint ab --config` and the GPU tier force a tile: here a 16 x 8 one with 8-wide K steps,
    # so 37 x 40 x 72 takes 3 x 5 tiles and 9 K steps, against float64.
    family = get_family("swiglu")
    params = {"rows": 37, "inter": 40, "hidden": 72}
    case = family.build_case("custom", params, "bf16", CPU)
    config = {**triton_gemm.GEMM_CONFIG, "BLOCK_M": 16, "BLOCK_N": 8, "BLOCK_K": 8, "PERSISTENT": 0}
    output = family.variants["triton_gemm"].build(case, config=config)()
    verdict = check(family, "bf16", output, family.reference(case.inputs, params))
    assert verdict.passed, verdict.message
