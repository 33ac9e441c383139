"""GPU tier: the bf16 model check against Hugging Face in fp32 (models/checks.py), on real shapes.

Each set's bf16 logits must be no further from HF-fp32's than HF-bf16's are (the tolerance as the
floor), whole model where its fp32 copy fits; with too little memory the check runs on the first
layers, the same kernels on a copy of them. Numbers are not asserted beyond the gate.
"""

from __future__ import annotations

import pytest

from rooflint.models.model_run import run_model
from rooflint.models.outcome import ModelRequest
from rooflint.outputs.results import OK

pytestmark = pytest.mark.gpu
pytest.importorskip("transformers")


def request(tmp_path, **fields) -> ModelRequest:
    base = dict(model="llama-3.2-1b", config="llama-3.2-1b", batch=2, seq=256, prompt=64, new_tokens=8,
                dtype="bf16", kernels=["eager", "triton"], out=tmp_path, device="cuda", rep_ms=20,
                plots=False)  # fmt: skip
    base.update(fields)
    return ModelRequest(**base)


def test_every_set_of_the_whole_1b_model_is_as_close_to_fp32_as_hf_bf16(tmp_path):
    outcome = run_model(request(tmp_path))
    for result in outcome.sets:
        assert result.status == OK, (result.name, result.message)
        check = result.check
        assert check.hf_error is not None and check.layers is None, check.describe()  # the whole model in fp32
        assert check.rel_error <= check.tolerance
        assert "vs fp32 (HF bf16: " in check.describe()


def test_short_memory_checks_the_first_layers_on_the_gpu(tmp_path, monkeypatch):
    from rooflint.models import llama, memory
    from rooflint.models.base import config_with_layers

    config = llama.SPEC.hf_config("llama-3.2-1b")
    one, two = (memory.parameter_bytes(llama.SPEC, config_with_layers(config, n), 4) for n in (1, 2))
    per_layer, rest = two - one, 2 * one - two
    dims = llama.SPEC.dims(config)
    # room for 12 of the 16 layers in fp32 (and a half), which also holds the whole bf16 run
    need = rest + 12.5 * per_layer + memory.prefill_activation_bytes(dims, 2, 256, 4)
    monkeypatch.setattr(memory, "free_bytes", lambda device: int(need / memory.HEADROOM))
    (result,) = run_model(request(tmp_path, kernels=["eager"], isolate=False)).sets  # the patch holds in-process
    assert result.status == OK, result.message
    assert result.check.layers == 12, result.check.describe()
    assert "vs fp32 on the first 12 of 16 layers (HF bf16: " in result.check.describe()
