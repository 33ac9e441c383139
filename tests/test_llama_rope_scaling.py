"""RoPE scaling variants of Hugging Face Llama configs (rope_scaling's rope_type): every one HF's Llama
runs gives rooflint's tables, and so its eager and triton sets' logits, what HF computes.

The tiny config is tests/tiny_llama.py's (hidden 64, 2 layers, head_dim 16, 64 positions) with a
short original length (16) so that every variant's scaling changes the angles inside it.
"""

from __future__ import annotations

import pytest
import torch
from tiny_llama import TINY_LLAMA

from rooflint.core.errors import UserError
from rooflint.models import checks, llama
from rooflint.models.base import OpRecorder, build

pytest.importorskip("transformers", reason="the model tests need transformers")

ORIGINAL = 16
# head_dim 16: longrope's factors are one per frequency (D/2 = 8)
SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL},
    "longrope": {"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0],
                 "long_factor": [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0],
                 "original_max_position_embeddings": ORIGINAL},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": ORIGINAL},
}  # fmt: skip


def loaded_with(scaling, dtype=torch.float32):
    spec = llama.Llama({"t": {**TINY_LLAMA, "rope_scaling": scaling}})
    return spec, build(spec, "t", dtype, torch.device("cpu"))


def logits_of(spec, loaded, name, ids):
    kernels = spec.kernel_set(name, loaded.dtype, torch.device("cpu"), 16, spec.norm_eps(loaded.hf.config))
    return spec.forward(loaded.weights, kernels, ids, 0, None, OpRecorder())


@pytest.mark.parametrize("kind", list(SCALINGS))
def test_tables_are_hugging_faces_rotary_embedding(kind):
    _, loaded = loaded_with(SCALINGS[kind])
    rotary = loaded.hf.model.rotary_emb
    x = torch.zeros((), dtype=torch.float32)
    for length in (ORIGINAL, 40):  # longrope: its short factors, then (past 16) its long ones
        cos, sin = rotary(x, torch.arange(length)[None])
        ours_cos, ours_sin = loaded.weights.rope_tables_for(0, length)
        torch.testing.assert_close(ours_cos[:length], cos[0], rtol=0, atol=1e-6)
        torch.testing.assert_close(ours_sin[:length], sin[0], rtol=0, atol=1e-6)
    if kind == "yarn":  # its attention factor scales cos and sin: cos(0) is the factor, not 1
        assert loaded.weights.cos[0, 0] == pytest.approx(0.1 * torch.log(torch.tensor(4.0)).item() + 1)


@pytest.mark.parametrize("kind", list(SCALINGS))
def test_eager_logits_match_hugging_face_past_the_original_length(kind):
    spec, loaded = loaded_with(SCALINGS[kind])
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(1))
    assert checks.relative_error(logits_of(spec, loaded, "eager", ids), checks.hf_logits(loaded.hf, ids)) < 1e-5


@pytest.mark.parametrize("kind", ["yarn", "longrope"])
def test_triton_logits_match_hugging_face(kind):
    spec, loaded = loaded_with(SCALINGS[kind])
    ids = torch.randint(0, 256, (1, 20), generator=torch.Generator().manual_seed(2))
    assert checks.relative_error(logits_of(spec, loaded, "triton", ids), checks.hf_logits(loaded.hf, ids)) < 1e-5


def test_longrope_picks_its_long_tables_per_forward_as_hugging_face_does():
    _, loaded = loaded_with(SCALINGS["longrope"])
    weights = loaded.weights
    assert weights.long_after == ORIGINAL and not torch.equal(weights.long_cos, weights.cos)
    assert weights.rope_tables_for(0, ORIGINAL)[0] is weights.cos  # positions 0..15: short factors
    assert weights.rope_tables_for(ORIGINAL - 1, 2)[0] is weights.long_cos  # reaches position 16: long


def test_dynamic_ntk_keeps_the_initial_base_within_the_models_positions():
    # HF grows dynamic NTK's base only for a forward past max_position_embeddings, which rooflint refuses
    _, dynamic = loaded_with(SCALINGS["dynamic"])
    _, plain = loaded_with(None)
    assert torch.equal(dynamic.weights.cos, plain.weights.cos)
    grown, _ = llama.rope_frequencies(dynamic.hf.config, seq_len=2 * TINY_LLAMA["max_position_embeddings"])
    assert not torch.allclose(grown, llama.rope_frequencies(plain.hf.config)[0])


def test_an_unsupported_rope_type_is_one_line_naming_the_supported_ones():
    with pytest.raises(UserError) as error:
        llama.Llama({"t": {**TINY_LLAMA, "rope_scaling": {"rope_type": "proportional", "factor": 2.0}}}).hf_config("t")
    line = str(error.value)
    assert "\n" not in line and "rope_type='proportional'" in line
    assert "default, linear, dynamic, yarn, longrope, llama3" in line
