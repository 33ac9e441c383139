"""Which Hugging Face architectures rooflint's Llama-family forward runs, and the built-in shapes.

A config is a plain dict of Hugging Face config fields (what a checkpoint's config.json holds), so
a built-in name and a config.json path go through the same checks. The shapes are the published
ones of each model's config.json on the Hugging Face Hub, written out here: nothing is downloaded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rooflint.core.errors import UserError

# model_type -> (transformers config class, causal LM class). Qwen2 differs from Llama only by the
# biases on q, k and v; Mistral (v0.3 and later: no sliding window) is Llama's block.
ARCHITECTURES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
}
# The RoPE variants the forward implements: every rope_type Hugging Face's Llama runs but
# "proportional", a partial rotation (models/llama.py rope_frequencies).
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")
_LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}  # fmt: skip

PRESETS: dict[str, dict[str, Any]] = {
    "llama-3.2-1b": {
        "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192, "vocab_size": 128256,
        "rope_theta": 500000.0, "rope_scaling": {**_LLAMA3_ROPE, "factor": 32.0}, "tie_word_embeddings": True,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    },
    "llama-3.1-8b": {
        "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336, "vocab_size": 128256,
        "rope_theta": 500000.0, "rope_scaling": {**_LLAMA3_ROPE, "factor": 8.0}, "tie_word_embeddings": False,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    },
    "qwen2.5-0.5b": {
        "model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
        "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936, "rope_theta": 1000000.0,
        "tie_word_embeddings": True, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
        "use_sliding_window": False, "hidden_act": "silu",
    },
    "qwen2.5-7b": {
        "model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
        "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "rope_theta": 1000000.0,
        "tie_word_embeddings": False, "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
        "use_sliding_window": False, "hidden_act": "silu",
    },
    # Mistral-7B-v0.3: v0.1's 4096-token sliding window is gone, the vocabulary is 32768.
    "mistral-7b": {
        "model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336, "vocab_size": 32768,
        "rope_theta": 1000000.0, "tie_word_embeddings": False, "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-5, "sliding_window": None, "hidden_act": "silu",
    },
}  # fmt: skip


def supported() -> str:
    return ", ".join([*ARCHITECTURES, "gpt2 (built-in presets only)"])


def read_json_config(path: Path, source: str, unreadable: Callable[[str], str]) -> dict[str, Any]:
    """The JSON object a config.json holds; one line where it cannot be read (``unreadable`` given
    the OS's reason), is not JSON or is not an object (each naming ``source``)."""
    try:
        fields = json.loads(path.read_text())
    except OSError as error:
        raise UserError(unreadable(str(error.strerror or error))) from None
    except ValueError as error:  # JSONDecodeError, and UnicodeDecodeError for a binary file
        raise UserError(f"{source} is not a JSON config: {error}") from None
    if not isinstance(fields, dict):
        raise UserError(f"{source} is not a Hugging Face config (a JSON object with model_type)")
    return fields


def read_config_file(path: Path) -> dict[str, Any]:
    """A Hugging Face config.json (or a directory holding one) as a dict; one line when unreadable."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    fields = read_json_config(path, str(path), lambda why: f"cannot read the model config {path}: {why}")
    check_architecture(fields.get("model_type"), str(path))
    check_shape(fields, str(path))
    check_rope_type(fields, str(path))
    check_norm_eps(fields, str(path))
    check_buildable(fields, str(path))
    return fields


def check_buildable(fields: dict[str, Any], source: str) -> None:
    """Fields transformers' config takes (with at most a warning line) and its model then cannot be
    built with: each crashed the run with exit 1 (an AssertionError, an AttributeError) on its first build."""
    pad, vocab = fields.get("pad_token_id"), fields["vocab_size"]
    if type(pad) is int and not -vocab <= pad < vocab:  # nn.Embedding's padding_idx: a row of the vocabulary
        raise UserError(f"{source}: pad_token_id={pad} is outside the vocabulary; valid: 0 to {vocab - 1}, or null")
    if isinstance(fields.get("text_config"), dict):  # a multimodal wrapper's nested config, read by generation's
        raise UserError(
            f"{source}: a text_config inside a {fields['model_type']} config is not one rooflint builds; "
            "give the language model's own config.json"
        )


def check_rope_type(fields: dict[str, Any], source: str) -> None:
    """An unknown rope_type refused from the file's own fields: transformers' config class logs a
    warning line about it while it is built, ahead of check_features' refusal."""
    rope = fields.get("rope_parameters") or fields.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    if kind not in ROPE_TYPES:
        raise UserError(f"{source}: rope_type={kind!r}, which rooflint's forward lacks; valid: {', '.join(ROPE_TYPES)}")
    # transformers takes any rope_theta: a string crashed the build, a negative one made every logit NaN
    theta = rope.get("rope_theta", fields.get("rope_theta")) if isinstance(rope, dict) else fields.get("rope_theta")
    if theta is not None and (type(theta) not in (int, float) or not 0 < theta < math.inf):
        raise UserError(f"{source}: rope_theta must be a positive number, not {theta!r}")
    # A scaling factor under 1 only draws a warning from transformers: 0 made every logit NaN (the
    # check failed, exit 1), a negative one ran and passed as a model no checkpoint has.
    factor = rope.get("factor") if isinstance(rope, dict) and kind != "default" else None
    if factor is not None and (type(factor) not in (int, float) or not 1 <= factor < math.inf):
        raise UserError(f"{source}: the {kind} rope scaling's factor must be a number of at least 1, not {factor!r}")


def check_norm_eps(fields: dict[str, Any], source: str) -> None:
    """transformers takes a negative or NaN rms_norm_eps: RMSNorm's rsqrt of a negative variance made
    every logit NaN, and the run reported each kernel set as failing its check (exit 1)."""
    eps = fields.get("rms_norm_eps")
    if eps is not None and (type(eps) not in (int, float) or not 0 <= eps < math.inf):
        raise UserError(f"{source}: rms_norm_eps must be a finite number of at least 0, not {eps!r}")


# The fields that size the model. transformers fills a missing one with its own default (Llama-2-7B's)
# and accepts a negative or zero one, which then fails deep inside the build: checked here instead.
SHAPE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")


def check_shape(fields: dict[str, Any], source: str) -> None:
    """Refuse, in one line, a config whose shape fields are missing, not positive integers, or whose
    heads do not divide the way attention needs."""
    optional = [name for name in ("num_key_value_heads", "head_dim") if fields.get(name) is not None]
    for name in (*SHAPE_FIELDS, *optional):
        value = fields.get(name)
        if type(value) is not int or value < 1:  # bool is an int to Python, not to a config
            got = "it is missing" if name not in fields else f"not {value!r}"
            raise UserError(f"{source}: {name} must be a positive integer, {got}")
    heads, kv_heads = fields["num_attention_heads"], fields.get("num_key_value_heads") or fields["num_attention_heads"]
    if heads % kv_heads:
        raise UserError(f"{source}: num_key_value_heads={kv_heads} must divide num_attention_heads={heads}")
    if fields.get("head_dim") is None and fields["hidden_size"] % heads:
        raise UserError(
            f"{source}: hidden_size={fields['hidden_size']} must be a multiple of num_attention_heads={heads} "
            "(or give head_dim)"
        )
    # RoPE rotates channel pairs. transformers refuses an odd head only above 4 (its tiny test fixtures
    # use 1 to 3), and at 1 or 3 HF's forward raised a shape mismatch or rooflint's cache append an
    # IndexError: a crash (exit 1) or a kernel set reported as failing, for a config no model can run.
    head_dim = fields.get("head_dim") or fields["hidden_size"] // heads
    if head_dim % 2:
        given = f"hidden_size={fields['hidden_size']} over num_attention_heads={heads} gives head_dim {head_dim}, which"
        if fields.get("head_dim"):
            given = f"head_dim={head_dim}"
        raise UserError(f"{source}: {given} is odd; RoPE rotates pairs of channels: valid: an even head_dim")


def check_architecture(model_type: Any, source: str) -> None:
    if model_type not in ARCHITECTURES:
        raise UserError(f"unsupported architecture model_type={model_type!r} in {source}; supported: {supported()}")


def config_name(path: Path) -> str:
    """The name a config file's rows carry: its directory's name for .../<model>/config.json."""
    path = Path(path)
    if path.is_dir():
        return path.name
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem


def check_features(config: Any) -> None:
    """Refuse, in one line, what the forward does not implement (before any weight is built)."""
    wrong = []
    if getattr(config, "hidden_act", "silu") != "silu":
        wrong.append(f"hidden_act={config.hidden_act!r} (the forward's MLP is SwiGLU)")
    rope = dict(getattr(config, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") not in ROPE_TYPES:
        wrong.append(f"rope_type={rope.get('rope_type')!r} (supported: {', '.join(ROPE_TYPES)})")
    if rope.get("partial_rotary_factor", 1.0) != 1.0:
        wrong.append(f"partial_rotary_factor={rope['partial_rotary_factor']}")
    if (
        getattr(config, "use_sliding_window", False)
        or getattr(config, "sliding_window", None) is not None
        and (config.model_type == "mistral")
    ):
        wrong.append(f"sliding_window={config.sliding_window} (the forward attends to the whole context)")
    if wrong:
        raise UserError(f"this {config.model_type} config uses {'; '.join(wrong)}, which rooflint's forward lacks")
