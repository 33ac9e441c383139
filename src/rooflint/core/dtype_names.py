"""The float dtype names, importable without torch (core.family, which maps them to torch dtypes,
imports torch): `rooflint model` judges its --dtype before torch loads."""

from __future__ import annotations

FLOAT_DTYPES = ("fp32", "fp16", "bf16")
