"""The models `rooflint model` knows: one ModelSpec module each, listed here."""

from __future__ import annotations

import importlib

from rooflint.core.errors import UserError
from rooflint.models.base import ModelSpec

# name -> module defining SPEC. A Llama-style model is one more line and one more module.
MODELS = {"gpt2": "rooflint.models.gpt2"}


def get_model(name: str) -> ModelSpec:
    if name not in MODELS:
        raise UserError(f"unknown model {name!r}; valid: {', '.join(MODELS)}")
    return importlib.import_module(MODELS[name]).SPEC
