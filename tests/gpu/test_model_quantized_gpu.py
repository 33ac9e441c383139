"""GPU tier: `rooflint model llama-3.2-1b --weights-dtype int8|fp8`, two layers of the real shapes.

The triton set (inside CUDA graphs: the weight-only CUDA kernel, gate/up with its SwiGLU epilogue, and
a quantized head) and the eager set (dequantize, then
F.linear) pass the model checks and the quantized decode check (against the model whose projections
are the dequantized weights, in fp32; the drift from the bf16 weights reported); the decode floor
counts the quantized bytes. Numbers other than the floor's bytes are not asserted.
"""

from __future__ import annotations

import pytest

from rooflint.models.model_run import run_model
from rooflint.models.outcome import ModelRequest
from rooflint.outputs.results import OK

pytestmark = pytest.mark.gpu
pytest.importorskip("transformers")


def request(tmp_path, **fields) -> ModelRequest:
    base = dict(model="llama-3.2-1b", config="llama-3.2-1b", layers=2, batch=8, seq=256, prompt=64, new_tokens=16,
                dtype="bf16", kernels=["eager", "triton"], out=tmp_path, device="cuda", rep_ms=50,
                plots=False)  # fmt: skip
    base.update(fields)
    return ModelRequest(**base)


@pytest.mark.parametrize("weights_dtype", ["int8", "fp8"])
def test_quantized_decode_passes_its_checks_inside_cuda_graphs(tmp_path, weights_dtype):
    plain = run_model(request(tmp_path / "bf16", kernels=["triton"]))
    outcome = run_model(request(tmp_path / weights_dtype, weights_dtype=weights_dtype))
    for result in outcome.sets:
        assert result.status == OK, (result.name, result.message)
        assert f"{weights_dtype} decode logits rel err" in result.note, result.note
        # the gate is against the dequantized model in fp32; the format's drift from bf16 is a number
        assert "vs fp32 on the dequantized weights" in result.note, result.note
        assert f"{weights_dtype} weights move the logits" in result.note, result.note
        assert f"weights={weights_dtype} per output channel" in result.plan
    triton = next(r for r in outcome.sets if r.name == "triton")
    assert "CUDA graphs" in triton.note, triton.note
    bf16, quantized = plain.sets[0].phases["decode"].costs, triton.phases["decode"].costs
    # Both steps write silu(gate) * up from the gate/up GEMM and rotate q and K (and append K and V) in the
    # QKV GEMM's epilogue (the held kernel's for bf16, weight_only_gemm.cuda's codes_qkv_rope for the codes),
    # so neither has a swiglu or a rope op, and each op differs only by the weight's bytes.
    assert "swiglu" not in bf16 and "swiglu" not in quantized
    assert "rope" not in bf16 and "rope" not in quantized
    assert "qkv_rope" in triton.plan, triton.plan
    layers = 2
    ops = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head")
    saved = {op: bf16[op].bytes - quantized[op].bytes for op in ops}
    shapes = {
        "qkv_proj": (2048, 3072),
        "o_proj": (2048, 2048),
        "gate_up_proj": (2048, 16384),
        "down_proj": (8192, 2048),
    }
    expected = {op: layers * (k * n - 4 * n) for op, (k, n) in shapes.items()} | {"lm_head": 2048 * 128256 - 4 * 128256}
    assert saved == expected


@pytest.mark.parametrize("weights_dtype", ["int8", "fp8"])
def test_all_sixteen_layers_pass_the_gate_whatever_the_formats_drift(tmp_path, weights_dtype):
    """At full depth the format moves a random-weight model's logits 7% (int8) and 20% (fp8) from bf16:
    that is reported; the gate, against the same dequantized model in fp32, holds the kernels."""
    outcome = run_model(request(tmp_path, layers=None, kernels=["triton"], weights_dtype=weights_dtype))
    (triton,) = outcome.sets
    assert triton.status == OK, (triton.message, triton.note)
    assert f"{weights_dtype} weights move the logits" in triton.note, triton.note
