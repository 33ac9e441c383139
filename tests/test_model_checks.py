"""The model check of a reduced-precision run (models/checks.py, kernel_set_run.fp32_reference):
the set's logits against HF evaluated in fp32 on the same weights, gated by HF's own error in the
run's dtype, on the whole model or, where an fp32 copy cannot fit, on its first layers."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_llama import TINY_LLAMA

from rooflint.core.specs import measured_spec
from rooflint.models import checks, llama, memory
from rooflint.models.base import build, copy_model
from rooflint.models.kernel_set_run import fp32_layers, fp32_reference
from rooflint.models.llama_kernels import LlamaEager
from rooflint.models.model_run import run_model
from rooflint.models.outcome import ModelRequest
from rooflint.outputs.results import FAILED, OK

pytest.importorskip("transformers", reason="the model tests need transformers")

TINY = {**TINY_LLAMA, "tie_word_embeddings": False}
SPEC = llama.Llama({"tiny": TINY})
CPU = torch.device("cpu")
CPU_SPEC = measured_spec(
    "cpu", "CPU (test)", 10.0, {"tensor_fp32_tflops": 0.1, "tensor_bf16_tflops": 0.1, "cuda_fp32_tflops": 0.1}, "test"
)


def ids(batch=2, seq=16) -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module")
def bf16_model():
    return build(SPEC, "tiny", torch.bfloat16, CPU)


@pytest.fixture(scope="module")
def whole_reference(bf16_model):
    tokens = checks.hf_greedy(bf16_model.hf, ids()[:, :4], 2)
    return fp32_reference(bf16_model, ids(), tokens, memory.free_bytes(CPU))


def away_from_fp32(reference: checks.Reference, hf: torch.Tensor, factor: float) -> torch.Tensor:
    """Logits ``factor`` times as far from the fp32 reference as HF's own, along HF's error."""
    exact = reference.logits
    return exact + factor * (hf.float() - exact)


def test_the_reference_is_hf_in_fp32_on_the_same_weights(bf16_model, whole_reference):
    exact = copy_model(bf16_model, torch.float32)
    assert next(exact.hf.parameters()).dtype == torch.float32
    for (name, ours), (_, theirs) in zip(exact.hf.named_parameters(), bf16_model.hf.named_parameters()):
        assert torch.equal(ours, theirs.float()), name  # bf16 values, held exactly in fp32
    assert whole_reference.logits.dtype == torch.float32 and whole_reference.layers is None
    assert torch.equal(whole_reference.logits, checks.hf_logits(exact.hf, ids()))
    hf = checks.hf_logits(bf16_model.hf, ids())
    assert whole_reference.hf_error == checks.relative_error(hf, whole_reference.logits) > 0


def test_a_set_as_far_from_fp32_as_hf_passes_and_twice_as_far_fails(bf16_model, whole_reference, monkeypatch):
    monkeypatch.setitem(checks.MODEL_TOLERANCES, "bf16", 0.0)  # no floor: the gate is HF's own error
    hf = checks.hf_logits(bf16_model.hf, ids())
    tokens = whole_reference.tokens
    level = checks.compare(away_from_fp32(whole_reference, hf, 1.0), tokens, whole_reference, "bf16")
    twice = checks.compare(away_from_fp32(whole_reference, hf, 2.0), tokens, whole_reference, "bf16")
    assert level.rel_error == pytest.approx(whole_reference.hf_error, rel=1e-3)
    assert level.passed and not twice.passed
    assert twice.tolerance == pytest.approx(checks.REFERENCE_MARGIN * whole_reference.hf_error)
    text = twice.describe()
    assert f"logits rel err {twice.rel_error:.3g} vs fp32 (HF bf16: {whole_reference.hf_error:.3g}; " in text
    assert f"gate {twice.tolerance:.3g})" in text and "further from fp32 than HF bf16's" in text
    assert "greedy tokens match HF" in text and not twice.gating_tokens  # information, not a gate


def test_the_tolerance_is_the_floor_of_the_gate(whole_reference):
    assert whole_reference.hf_error < checks.MODEL_TOLERANCES["bf16"] / checks.REFERENCE_MARGIN
    assert checks.gate("bf16", whole_reference.hf_error) == checks.MODEL_TOLERANCES["bf16"]
    assert checks.gate("bf16", 0.2) == pytest.approx(0.25)
    assert checks.gate("fp32", None) == checks.MODEL_TOLERANCES["fp32"]


def room_for(loaded, layers: int, batch=2, seq=16) -> int:
    """Free bytes that hold an fp32 copy of ``layers`` layers and a half, with its activations."""
    total = memory.parameter_bytes(SPEC, loaded.hf.config, 4)
    one_layer = total - memory.parameter_bytes(SPEC, SPEC.hf_config("tiny", 1), 4)
    rest = total - loaded.dims.layers * one_layer
    need = rest + (layers + 0.5) * one_layer + memory.prefill_activation_bytes(loaded.dims, batch, seq, 4)
    return int(need / memory.HEADROOM)


def test_short_memory_takes_the_first_layers_of_the_same_weights(bf16_model):
    assert fp32_layers(bf16_model, 2, 16, room_for(bf16_model, 2)) == 2
    assert fp32_layers(bf16_model, 2, 16, room_for(bf16_model, 1)) == 1
    assert fp32_layers(bf16_model, 2, 16, 1000) == 0
    reference = fp32_reference(bf16_model, ids(), ids()[:, :2], room_for(bf16_model, 1))
    assert reference.layers == 1 and reference.total_layers == 2
    # HF's own model with its second layer dropped: layer 0, the final norm and the head
    cut = copy.deepcopy(bf16_model.hf).float()
    cut.model.layers = cut.model.layers[:1]
    cut.config.num_hidden_layers = 1
    assert checks.relative_error(reference.logits, checks.hf_logits(cut, ids())) < 1e-6
    assert reference.hf_error > 0


def test_a_run_short_of_memory_checks_the_set_on_the_first_layers(tmp_path, monkeypatch, bf16_model):
    monkeypatch.setattr(memory, "free_bytes", lambda device: room_for(bf16_model, 1, batch=1, seq=8))
    request = ModelRequest(model="llama", model_spec=SPEC, config="tiny", batch=1, seq=8, prompt=4, new_tokens=2,
                           dtype="bf16", kernels=["eager"], out=tmp_path, device="cpu", spec=CPU_SPEC, rep_ms=0,
                           plots=False)  # fmt: skip
    # the preflight's need for the whole bf16 run fits in what is left for a 1-layer fp32 copy
    (result,) = run_model(request).sets
    assert result.status == OK, result.message
    text = result.check.describe()
    assert "vs fp32 on the first 1 of 2 layers (HF bf16: " in text and "; gate 0.05)" in text


def test_a_perturbed_slot_fails_against_fp32_and_is_never_timed(tmp_path, monkeypatch):
    original = LlamaEager.silu_mul

    def silu_mul_doubled(self, gate, up):  # a plausible kernel bug: the product scaled twice
        return original(self, gate, up) * 2.0

    monkeypatch.setattr(LlamaEager, "silu_mul", silu_mul_doubled)
    request = ModelRequest(model="llama", model_spec=SPEC, config="tiny", batch=1, seq=8, prompt=4, new_tokens=2,
                           dtype="bf16", kernels=["eager"], out=tmp_path, device="cpu", spec=CPU_SPEC, rep_ms=0,
                           plots=False)  # fmt: skip
    (result,) = run_model(request).sets
    assert result.status == FAILED and not result.phases
    assert "vs fp32 (HF bf16: " in result.message and "further from fp32 than HF bf16's" in result.message
