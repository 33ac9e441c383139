"""GPU tier: the Llama family's library sets (models/library_sets.py) against Hugging Face, where
their libraries import (scripts/device/peers.sh puts them on PYTHONPATH on a GPU machine).

Each set runs inside run_model as the triton set does: bf16 logits against HF in fp32, greedy
tokens against HF, CUDA graphs for decode, then timed. A library that is absent skips its test
with the set's own reason and install line. Numbers are not asserted.
"""

from __future__ import annotations

import pytest

from rooflint.models.model_run import run_model
from rooflint.models.outcome import ModelRequest
from rooflint.outputs.results import OK, SKIPPED

pytestmark = pytest.mark.gpu
pytest.importorskip("transformers")


def run_set(tmp_path, name: str):
    request = ModelRequest(model="llama-3.2-1b", config="llama-3.2-1b", layers=2, batch=4, seq=256, prompt=64,
                           new_tokens=16, dtype="bf16", kernels=[name], out=tmp_path, device="cuda", rep_ms=50,
                           plots=False, isolate=False)  # fmt: skip
    (result,) = run_model(request).sets
    if result.status == SKIPPED:
        pytest.skip(result.message)
    return result


@pytest.mark.parametrize("name", ["liger", "flashinfer", "fa4"])
def test_library_set_passes_the_checks_against_hugging_face(tmp_path, name):
    result = run_set(tmp_path, name)
    assert result.status == OK, (name, result.message, result.plan)
    assert result.check.logits_ok, result.check.describe()
    assert {"prefill", "decode", "generate"} <= set(result.phases)
    assert "CUDA graphs" in result.note, result.note  # the library kernels were captured


def test_liger_set_replaces_norm_rope_and_swiglu(tmp_path):
    result = run_set(tmp_path, "liger")
    plan = dict(item.split("=", 1) for item in result.plan.split("; "))
    for slot in ("rms_norm", "rope", "swiglu"):
        assert plan[slot].startswith("liger-kernel"), result.plan
    assert plan["decode_attention"].startswith("eager"), result.plan


def test_fa4_decodes_with_split_kv_only_where_flash_attention_4_has_it(tmp_path):
    """FlashAttention-4's SM 9.x forward asserts no split-KV: the set asks for one split there."""
    import torch

    from rooflint.models.library_sets import fa4_num_splits

    result = run_set(tmp_path, "fa4")
    assert result.status == OK, (result.message, result.plan)
    plan = dict(item.split("=", 1) for item in result.plan.split("; "))
    splits = fa4_num_splits(torch.device("cuda"))
    assert plan["decode_attention"].endswith(f"(num_splits={splits})"), result.plan
    if torch.cuda.get_device_capability()[0] == 9:
        assert splits == 1
