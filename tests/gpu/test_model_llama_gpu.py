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


@pytest.mark.parametrize("name", ["llama-3.2-1b", "qwen2.5-0.5b", "mistral-7b"])
def test_eager_and_triton_sets_pass_their_checks(tmp_path, name):
    outcome = run_model(request(tmp_path, model=name, config=name, kernels=["eager", "triton"]))
    for result in outcome.sets:
        assert result.status == OK, (result.name, result.message)
        assert result.check.logits_ok
        assert {"prefill", "decode", "generate"} <= set(result.phases)
    triton = next(r for r in outcome.sets if r.name == "triton")
    plan = dict(item.split("=", 1) for item in triton.plan.split("; "))
    for slot in ("rms_norm", "swiglu", "decode_attention", "kv_append"):
        assert plan[slot] == "triton", triton.plan
    assert plan["prefill_attention"].startswith("triton"), triton.plan


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
