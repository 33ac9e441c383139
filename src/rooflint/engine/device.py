"""Which device a command measures on: the one place a --device is checked."""

from __future__ import annotations

from rooflint.core.errors import UserError


def resolve_device(device: str | None) -> str:
    """``device`` checked against this machine; None means cuda when a GPU is visible, else cpu.
    torch is imported only to look for a GPU: `rooflint model` checks a --device cpu before it loads."""
    if device is not None and device not in ("cuda", "cpu"):
        raise UserError(f"unknown device {device!r}; valid: cuda, cpu")
    if device == "cpu":
        return device
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        raise UserError("--device cuda asked for, but no CUDA GPU is visible; use --device cpu")
    return device
