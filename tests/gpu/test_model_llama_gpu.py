"""GPU tier: the Llama family's kernel sets on a GPU, a few layers of real shapes.

Each set (eager, compile, triton) is checked inside run_model against Hugging Face's eager model
(bf16 logits within the model tolerance, greedy tokens reported), CUDA graphs included; the HF
static-cache + reduce-overhead peer runs through generate as HF documents it and gives a decode
step; a sweep point that cannot fit is a skipped row with the reason. Numbers are not asserted.
"""

from __future__ import annotations

import pytest

from rooflint.models import llama
from rooflint.models.model_run import run_model
from rooflint.models.outcome import ModelRequest
from rooflint.outputs.results import OK, SKIPPED

pytestmark = pytest.mark.gpu
pytest.importorskip("transformers")


def request(tmp_path, **fields) -> ModelRequest:
    base = dict(model="llama-3.2-1b", config="llama-3.2-1b", layers=2, batch=4, seq=256, prompt=64, new_tokens=16,
                dtype="bf16", out=tmp_path, device="cuda", rep_ms=50, plots=False)  # fmt: skip
    base.update(fields)
    return ModelRequest(**base)


@pytest.mark.parametrize("name", ["llama-3.2-1b", "llama-3.1-8b", "qwen2.5-0.5b", "mistral-7b"])
def test_eager_and_triton_sets_pass_their_checks(tmp_path, name):
    outcome = run_model(request(tmp_path, model=name, config=name, kernels=["eager", "triton"]))
    for result in outcome.sets:
        assert result.status == OK, (result.name, result.message)
        assert result.check.logits_ok
        assert {"prefill", "decode", "generate"} <= set(result.phases)
    triton = next(r for r in outcome.sets if r.name == "triton")
    plan = dict(item.split("=", 1) for item in triton.plan.split("; "))
    for slot in ("rms_norm", "swiglu", "decode_attention"):
        assert plan[slot] == "triton", triton.plan
    for slot in ("prefill_attention", "rope", "kv_append", "linear"):
        assert plan[slot].startswith("triton"), triton.plan
    assert "CUDA graphs" in triton.note, triton.note  # the decode step is graphed, as GPT-2's


def test_an_8b_shape_builds_in_bf16_on_the_gpu():
    import torch

    from rooflint.models.base import build

    loaded = build(llama.SPEC, "llama-3.1-8b", torch.bfloat16, torch.device("cuda"), layers=2)
    dtypes = {p.dtype for p in loaded.hf.parameters()}
    devices = {p.device.type for p in loaded.hf.parameters()}
    assert dtypes == {torch.bfloat16} and devices == {"cuda"}
    assert not loaded.hf.config.tie_word_embeddings
    assert loaded.weights.head.data_ptr() != loaded.weights.embed.data_ptr()


def test_rope_kernel_and_grouped_attention_in_bf16():
    import torch

    from rooflint.kernels.attention.triton import triton_attention
    from rooflint.models.cache import KVCache
    from rooflint.models.llama_kernels import LlamaEager
    from rooflint.models.ops.rope_append import rope_append

    cuda = torch.device("cuda")
    batch, tokens, heads, kv_heads, d, start = 4, 1, 32, 8, 128, 700
    hf_config = llama.SPEC.hf_config("llama-3.1-8b")
    cos, sin = llama.rope_tables(dict(hf_config.rope_parameters), d, 2048, torch.bfloat16, cuda)
    weights = llama.LlamaWeights(None, [], None, None, cos, sin, heads, kv_heads, d, 0)
    qkv = torch.randn(batch * tokens, (heads + 2 * kv_heads) * d, device=cuda, dtype=torch.bfloat16)
    caches = [KVCache(1, batch, kv_heads, d, 1024, torch.bfloat16, cuda) for _ in range(2)]
    q, k, _ = LlamaEager(torch.bfloat16, cuda, d, 1e-5).rope_append(qkv.clone(), batch, tokens, weights, start,
                                                                    caches[0], 0)  # fmt: skip
    fused = rope_append(qkv.clone(), cos, sin, tokens, start, heads, kv_heads, d,
                        (caches[1].slots(start, tokens), *caches[1].rows(0)))  # fmt: skip
    # HF rounds each product to bf16, the kernel once: a few bf16 ulps apart
    torch.testing.assert_close(fused[:, : heads * d].view_as(q), q, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(caches[1].k[0], caches[0].k[0], rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(caches[1].v[0], caches[0].v[0], rtol=0, atol=0)
    q = torch.randn(2, heads, 256, d, device=cuda, dtype=torch.bfloat16)
    k, v = (torch.randn(2, kv_heads, 256, d, device=cuda, dtype=torch.bfloat16) for _ in range(2))
    ours = triton_attention(q, k, v, True, group=heads // kv_heads)
    theirs = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True,
                                                              enable_gqa=True)  # fmt: skip
    assert float((ours.double() - theirs).norm() / theirs.norm()) < 1e-2


def test_compile_set_and_hf_static_compiled_peer(tmp_path):
    outcome = run_model(request(tmp_path, kernels=["compile"], hf_baseline=True))
    (result,) = outcome.sets
    assert result.status == OK, result.message
    static = outcome.baselines["hf_static_compile"]
    assert static.phase.name == "decode" and static.tokens_per_s > 0
    assert {"vllm", "sglang"} <= {r.variant for r in outcome.rows if r.status == SKIPPED}


def test_sweep_skips_the_point_that_cannot_fit(tmp_path):
    dims = llama.SPEC.dims(llama.SPEC.hf_config("llama-3.2-1b"))
    # all 16 layers at B=128 and ~131k tokens: a KV cache of ~550 GB, beyond any one GPU
    huge = dims.max_positions - 64
    outcome = run_model(request(tmp_path, layers=None, kernels=["eager"], sweep_batches=[1, 128],
                                sweep_contexts=[512, huge]))  # fmt: skip
    by_point = {(p.batch, p.context): p for p in outcome.sweep}
    assert by_point[(1, 512)].status == OK and by_point[(1, 512)].bound == "memory"
    assert by_point[(128, huge)].status == SKIPPED and "needs" in by_point[(128, huge)].message


@pytest.mark.parametrize("name,batch", [("llama-3.2-1b", 4), ("llama-3.1-8b", 1), ("qwen2.5-0.5b", 2)])
def test_norms_folded_into_the_decode_gemms_pass_the_checks(tmp_path, name, batch, monkeypatch):
    """ROOFLINT_NORM_IN_GEMM=both: the decode step folds both norms of each layer into the QKV and
    gate/up GEMMs (the plan names both fusions; no add_rms_norm op is left in decode), and the set still
    passes the logits check against Hugging Face with its greedy tokens reported. The MLP's fold needs the
    held gate/up kernel, so the ring kernel, which takes the larger models' gate/up by default, is off."""
    monkeypatch.setenv("ROOFLINT_NORM_IN_GEMM", "both")
    monkeypatch.setenv("ROOFLINT_RING", "0")
    outcome = run_model(request(tmp_path, model=name, config=name, batch=batch, kernels=["triton"]))
    (result,) = outcome.sets
    assert result.status == OK, result.message
    assert result.check.logits_ok
    assert "attn_norm_in_qkv" in result.plan and "mlp_norm_in_gate_up" in result.plan, result.plan
    decode = result.phases["decode"]
    assert "add_rms_norm" not in decode.costs and "add_rms_norm" not in decode.attribution.ops
    assert "add_rms_norm" in result.phases["prefill"].costs  # a prefill keeps its norm kernels
