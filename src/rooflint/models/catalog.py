"""The catalog of models `rooflint model` knows: built-in names, and any Hugging Face config.json.

A name is a ModelSpec module and one of its presets; ``gpt2`` with ``--config gpt2-medium`` still
works as before. Anything else that names an existing file or directory is read as a config.json
(models/architectures.py says which model_types run); its model is built from that config.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from rooflint.core.errors import UserError

if TYPE_CHECKING:  # base imports torch: a name refused here is refused before torch loads
    from rooflint.models.base import ModelSpec

# name -> (module defining SPEC, its preset)
BUILTINS = {
    "gpt2": ("rooflint.models.gpt2", "gpt2"),
    "gpt2-medium": ("rooflint.models.gpt2", "gpt2-medium"),
    "llama-3.2-1b": ("rooflint.models.llama", "llama-3.2-1b"),
    "llama-3.1-8b": ("rooflint.models.llama", "llama-3.1-8b"),
    "qwen2.5-0.5b": ("rooflint.models.llama", "qwen2.5-0.5b"),
    "qwen2.5-7b": ("rooflint.models.llama", "qwen2.5-7b"),
    "mistral-7b": ("rooflint.models.llama", "mistral-7b"),
}
MODELS = {"gpt2": "rooflint.models.gpt2", "llama": "rooflint.models.llama"}  # spec names: --config picks a preset


def _is_path(name: str) -> bool:
    return name.endswith(".json") or "/" in name or Path(name).exists()


def get_model(name: str) -> ModelSpec:
    """The ModelSpec of a built-in name, a spec name (gpt2, llama) or a config.json path."""
    valid = f"valid: {', '.join(BUILTINS)}, or a Hugging Face config.json path"
    if not name.strip():  # `rooflint model "$MODEL"`, unset: read as a path, it ran the config.json of the cwd
        raise UserError(f"the model name is empty; {valid}")
    if name in BUILTINS:
        return importlib.import_module(BUILTINS[name][0]).SPEC
    if name in MODELS:
        return importlib.import_module(MODELS[name]).SPEC
    if _is_path(name):
        from rooflint.models.llama import from_config_file

        return from_config_file(Path(name))
    raise UserError(f"unknown model {name!r}; {valid}")


def checkpoint_model_type(name: str) -> str | None:
    """The model_type a --weights checkpoint of the built-in or spec name ``name`` must hold, where
    its spec names one (None: judged by the spec's loader, once its module is imported)."""
    from rooflint.models.checkpoint_files import CHECKPOINT_MODEL_TYPES

    module = BUILTINS[name][0] if name in BUILTINS else MODELS.get(name)
    return CHECKPOINT_MODEL_TYPES.get(module)


def resolve(name: str, config: str | None) -> tuple[ModelSpec, str]:
    """(spec, preset) for ``rooflint model NAME [--config PRESET]``: an explicit --config wins
    (`gpt2 --config gpt2-medium`), else the name's own preset (or the file's one config)."""
    spec = get_model(name)
    if config is None:
        config = BUILTINS[name][1] if name in BUILTINS else next(iter(spec.configs))
    return spec, config
