"""The qkv_rope fusion on a CPU: skinny_pdl.cu's held kernel with RoPE and the K/V append in its
epilogue is a GPU's (the GPU tier checks the kernel against float64), so here its PyTorch reference
is checked against Hugging Face's rotate-half RoPE, and the triton Llama set's wiring (prepare(), the
plan, the forward's fused slot on decode rows only, the costs) runs with the reference in the
kernel's place: the logits must be the unfused step's."""

from __future__ import annotations

import pytest
import torch
from tiny_llama import TINY_LLAMA

from rooflint.kernels.gelu_linear import skinny, skinny_pdl
from rooflint.models import llama
from rooflint.models import quantized_weights as Q
from rooflint.models.base import Phase, build
from rooflint.models.llama_kernels import LlamaSlots, make_llama_kernel_set
from rooflint.models.rows import total_cost
from rooflint.models.runner import Runner

pytest.importorskip("transformers", reason="the model tests need transformers")

CPU = torch.device("cpu")


@pytest.mark.parametrize("m,tokens,start", [(1, 1, 0), (8, 1, 37), (6, 3, 5)])
@pytest.mark.parametrize("bias", [False, True])
def test_the_reference_is_the_projection_then_hugging_faces_rope_and_the_append(m, tokens, start, bias):
    heads, kv_heads, d, k = 3, 1, 16, 48
    gen = torch.Generator().manual_seed(m + start)
    n = (heads + 2 * kv_heads) * d
    x, w = torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen)
    b = torch.randn(n, generator=gen) if bias else None
    angles = torch.randn(64, d // 2, generator=gen)
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    pool = 4 * m * kv_heads
    k_rows, v_rows = torch.full((pool, d), float("nan")), torch.full((pool, d), float("nan"))
    slots = torch.randperm(pool, generator=gen)[: m * kv_heads]
    append = skinny.KVAppend(k_rows, v_rows, slots, heads * d, kv_heads, d)

    got = skinny_pdl.qkv_rope_reference(x, w, b, cos, sin, start, tokens, (heads + kv_heads) * d, d, append)
    y = torch.nn.functional.linear(x.double(), w.double(), None if b is None else b.double())
    positions = start + torch.arange(m) % tokens
    q = y[:, : heads * d].view(1, m, heads, d)  # [B, T, H, D]: row m is token m
    key = y[:, heads * d : (heads + kv_heads) * d].view(1, m, kv_heads, d)
    q, key = LlamaSlots.rope(None, q, key, cos[positions].double(), sin[positions].double())
    torch.testing.assert_close(got[:, : heads * d], q.reshape(m, -1).float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[:, heads * d : (heads + kv_heads) * d], key.reshape(m, -1).float())
    torch.testing.assert_close(got[:, (heads + kv_heads) * d :], y[:, (heads + kv_heads) * d :].float())
    assert torch.equal(k_rows[slots], got[:, heads * d : (heads + kv_heads) * d].reshape(-1, d))
    assert torch.equal(v_rows[slots], got[:, (heads + kv_heads) * d :].reshape(-1, d))
    untouched = torch.ones(pool, dtype=torch.bool)
    untouched[slots] = False
    assert torch.isnan(k_rows[untouched]).all() and torch.isnan(v_rows[untouched]).all()


@pytest.mark.parametrize(
    "k,m,steps",
    [(2048, 8, 16), (2048, 1, 16), (2048, 12, 8), (4096, 1, 16), (4096, 16, 0), (896, 8, 8), (896, 9, 0),
     (3584, 4, 16), (768, 8, 8), (768, 12, 0), (1616, 8, 0)],
)  # fmt: skip
def test_rope_steps_are_the_built_shares_that_split_k(k, m, steps):
    assert skinny_pdl.rope_steps(k, m) == steps
    if steps:
        warps = k // (16 * steps)
        assert k == 16 * steps * warps and (4 if m <= 8 else 8) <= warps <= skinny_pdl.MAX_WARPS


def test_why_not_rope_names_what_it_cannot_take_in_one_line():
    w = torch.zeros(96, 2048, dtype=torch.bfloat16)
    assert "needs a CUDA GPU" in skinny_pdl.why_not_rope(8, w, 64, 16)  # this machine has none
    assert "fp16 or bf16" in skinny_pdl.why_not_rope(8, w.float(), 64, 16)
    assert "head_dim 24 is not a multiple of 16" in skinny_pdl.why_not_rope(8, w, 48, 24)
    assert "RoPE over 72 of 96 outputs is not a whole number of heads of 16" in skinny_pdl.why_not_rope(8, w, 72, 16)
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        skinny_pdl.qkv_rope(torch.zeros(8, 2048, dtype=torch.bfloat16), w, None, w, w, 0, 1, 64, 16)


@pytest.fixture(scope="module")
def loaded():
    return build(llama.Llama({"tiny": TINY_LLAMA}), "tiny", torch.bfloat16, CPU, seed=0)


def test_the_triton_step_fuses_rope_into_qkv_where_the_held_kernel_takes_it(loaded, monkeypatch):
    kernels = make_llama_kernel_set("triton", torch.bfloat16, CPU, loaded.dims.head_dim, TINY_LLAMA["rms_norm_eps"])
    Q.attach(kernels, loaded.weights, None)
    prompt = torch.randint(0, TINY_LLAMA["vocab_size"], (2, 8), generator=torch.Generator().manual_seed(7))
    assert "qkv_rope" not in kernels.fusions(2, True)  # prepare() not called: no weight to decide by
    kernels.prepare(loaded.weights)
    assert kernels.qkv_w is loaded.weights.layers[0].qkv_w
    assert kernels.fusions(2, True) == frozenset()  # a CPU: the CUDA kernel cannot run
    unfused = Q.decode_logits(Runner(loaded, kernels, 2, 8, 2), prompt)

    calls = []

    def rope_on_cpu(x, w, b, cos, sin, start, tokens, rope_width, head_dim, append=None, out=None, pdl=False,
                    rms=None):  # fmt: skip
        assert rms is None  # no norm folded unless ROOFLINT_NORM_IN_GEMM asks
        calls.append((x.shape[0], start, tokens, rope_width, head_dim, append is not None))
        return skinny_pdl.qkv_rope_reference(x, w, b, cos, sin, start, tokens, rope_width, head_dim, append,
                                             compute=torch.float32)  # fmt: skip

    monkeypatch.setattr(skinny_pdl, "qkv_rope", rope_on_cpu)
    monkeypatch.setattr(skinny_pdl, "why_not_rope", lambda m, w, width, d: None if m <= 8 else "two X tiles")
    assert kernels.fusions(2, True) == {"qkv_rope"} and kernels.fusions(2, False) == frozenset()
    assert kernels.fusions(9, True) == frozenset()  # where the held kernel does not take the rows
    assert "fusions=qkv_rope at <= 8 decode rows" in kernels.describe()
    # with the prefill's fused gate/up (bf16 here) the plan names two fusions and still reads as
    # "; "-separated slot=how pairs, as the GPU tier and the results' readers parse it
    plan = dict(item.split("=", 1) for item in kernels.describe().split("; "))
    assert plan["fusions"].startswith("qkv_rope at <= 8 decode rows") and "gate_up_swiglu in prefill" in plan["fusions"]
    fused = Q.decode_logits(Runner(loaded, kernels, 2, 8, 2), prompt)
    d, heads, kv_heads = loaded.dims.head_dim, loaded.dims.heads, loaded.dims.kv_heads
    # the decode step's layers (the prefill's 16 rows are not fused), at the step's position, appending
    assert calls == [(2, 8, 1, (heads + kv_heads) * d, d, True)] * TINY_LLAMA["num_hidden_layers"]
    torch.testing.assert_close(fused, unfused, rtol=2e-2, atol=2e-2)


def test_with_qkv_rope_the_costs_lose_the_rope_op_and_its_round_trip(loaded):
    dims = loaded.dims
    decode = Phase("decode", 2, 1, 16)
    plain = llama.SPEC.op_costs(dims, decode, "bf16")
    fused = llama.SPEC.op_costs(dims, decode, "bf16", frozenset({"qkv_rope"}))
    assert "rope" in plain and "rope" not in fused
    rotated = dims.layers * decode.rows * (dims.heads + dims.kv_heads) * dims.head_dim * 2  # q and K, bf16
    v_read = dims.layers * decode.rows * dims.kv_heads * dims.head_dim * 2  # V, read back for the append
    assert total_cost(plain).bytes - total_cost(fused).bytes == 2 * rotated + v_read
    assert fused["qkv_proj"].cuda_flops == plain["qkv_proj"].cuda_flops + plain["rope"].cuda_flops
    both = llama.SPEC.op_costs(dims, decode, "bf16", frozenset({"qkv_rope", "gate_up_swiglu"}))
    assert "rope" not in both and "swiglu" not in both
