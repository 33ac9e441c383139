"""The tiny Llama config the model tests build on the CPU: the shape of a Llama (grouped-query
heads, RoPE at Llama 3's theta, SwiGLU, RMSNorm), small enough for Triton's interpreter; and a tiny
GPT-2 checkpoint's config beside it, and the helpers that save such checkpoints for the CLI tests."""

import json
import shutil
from pathlib import Path

TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "rope_theta": 500000.0,
    "tie_word_embeddings": True, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "hidden_act": "silu",
}  # fmt: skip

# GPT2Config's fields for a one-layer GPT-2 of 64 positions (a --weights checkpoint in the CLI tests)
TINY_GPT2 = {"n_embd": 64, "n_layer": 1, "n_head": 4, "vocab_size": 256, "n_positions": 64, "bos_token_id": 255,
             "eos_token_id": 255}  # fmt: skip


def checkpoint_root(tmp_path_factory, name: str):
    """A fresh folder for tiny save_pretrained checkpoints, and transformers; torch seeded. Skips the
    caller's tests where torch or transformers is missing."""
    import pytest

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers", reason="the model runs need transformers")
    torch.manual_seed(0)
    return tmp_path_factory.mktemp(name), transformers


def with_config(root: Path, source: str, name: str, text: str) -> None:
    """A copy of the checkpoint ``source`` whose config.json is ``text``."""
    shutil.copytree(root / source, root / name)
    (root / name / "config.json").write_text(text)


def edited(root: Path, source: str, name: str, **fields) -> None:
    """A copy of the checkpoint ``source`` with ``fields`` set in its config.json."""
    config = json.loads((root / source / "config.json").read_text())
    with_config(root, source, name, json.dumps({**config, **fields}))
