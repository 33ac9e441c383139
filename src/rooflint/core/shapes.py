"""Shape labels (``n=4096,causal=1``), importable without torch: core.family imports torch, and a
fleet's Dask worker keys its tasks by shape without measuring anything itself."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def shape_label(params: Mapping[str, Any]) -> str:
    return ",".join(f"{key}={int(value) if isinstance(value, bool) else value}" for key, value in params.items())
