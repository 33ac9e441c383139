"""Will a model run fit on the device? Checked from the config before any weight is allocated.

The estimate is the tensors a run holds at its peak, each named so a refusal says what to lower:
the weights (counted on the meta device: the model's own parameter list, no memory touched), the
KV cache at its capacity, and the prefill's activations: every position's logits twice (ours and
Hugging Face's reference), the reference's eager attention scores (B x H x T x T in fp32, where
the HF check materializes them) and one layer's widest intermediates; and the tables a model
computes by position beside its weights (RoPE's cos and sin: max_position_embeddings rows each,
whatever the run's length), with the fp32 scratch of building them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from rooflint.core.errors import UserError
from rooflint.kernels.kv_cache import BLOCK_SIZE
from rooflint.models.base import Dims

GB = 1e9
HEADROOM = 0.9  # the allocator's fragmentation and the CUDA context: plan for 90% of what is free


@dataclass(frozen=True)
class MemoryNeed:
    weights: int
    kv_cache: int
    activations: int
    rope_tables: int = 0  # the model's RoPE tables, with their build's fp32 scratch (ModelSpec.rope_table_bytes)

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.activations + self.rope_tables

    def describe(self) -> str:
        tables = f", RoPE tables {self.rope_tables / GB:.3g}" if self.rope_tables else ""
        return (
            f"{self.total / GB:.3g} GB (weights {self.weights / GB:.3g}, KV cache {self.kv_cache / GB:.3g}, "
            f"activations {self.activations / GB:.3g}{tables})"
        )


def parameter_bytes(spec: Any, hf_config: Any, size: int) -> int:
    """The model's parameters, tied ones once, from a build on the meta device (no memory)."""
    with torch.device("meta"):
        model = spec.hf_class()(hf_config)
    return sum(p.numel() for p in model.parameters()) * size


def kv_cache_bytes(dims: Dims, batch: int, tokens: int, size: int) -> int:
    capacity = -(-tokens // BLOCK_SIZE) * BLOCK_SIZE  # whole pages, as models/cache.py allocates
    return 2 * dims.layers * batch * dims.kv_heads * capacity * dims.head_dim * size


def prefill_activation_bytes(dims: Dims, batch: int, tokens: int, size: int, reference: bool = True) -> int:
    rows = batch * tokens
    logits = rows * dims.vocab * size * (2 if reference else 1)
    scores = batch * dims.heads * tokens * tokens * (4 + size) if reference else 0  # HF eager: fp32 softmax
    widest = rows * (3 * dims.ffn + 2 * (dims.heads + 2 * dims.kv_heads) * dims.head_dim + 4 * dims.hidden) * size
    return logits + scores + widest


def decode_activation_bytes(dims: Dims, batch: int, size: int) -> int:
    return batch * (2 * dims.vocab + 3 * dims.ffn + 8 * dims.hidden) * size


def free_bytes(device: torch.device) -> int:
    """What the device can still hold: free GPU memory, or the host's available pages."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def refusal(what: str, need: MemoryNeed, free: int, device: torch.device, lower: str) -> str | None:
    """One line saying why ``what`` cannot fit, or None where it fits."""
    if need.total <= HEADROOM * free:
        return None
    return f"{what} needs {need.describe()} but the {device.type} has {free / GB:.3g} GB free; lower {lower}"


def check_rope_tables(
    name: str, positions: int, tables: int, weights: int, free: int, device: torch.device, including: str = ""
) -> None:
    """max_position_embeddings refused in one line where the RoPE tables (``tables`` bytes over
    ``positions`` rows; ``including`` says whose besides the model's) cannot fit beside ``weights``."""
    whose = f", {including}" if including else ""
    what = f"RoPE cos/sin tables (one row per position{whose})"
    _check_position_rows(name, "max_position_embeddings", positions, tables, what, weights, "weights", free, device)


def check_position_table(
    name: str, field: str, positions: int, table: int, others: int, free: int, device: torch.device
) -> None:
    """``field`` (the config's positions) refused in one line where its learned position table
    (``table`` bytes over ``positions`` rows, among the weights) cannot fit beside the ``others``
    bytes of weights."""
    what = "learned position embeddings (one row per position, among the weights)"
    _check_position_rows(name, field, positions, table, what, others, "other weights", free, device)


def _check_position_rows(name: str, field: str, positions: int, table: int, what: str, beside: int, beside_what: str,
                         free: int, device: torch.device) -> None:  # fmt: skip
    """``field`` refused in one line, naming the most positions that fit, where ``table`` (``what``: bytes
    that grow by a row a position, ``positions`` rows) cannot fit beside ``beside`` bytes. They grow
    with the config's positions, not with any flag: refused by check_fits, its "lower --batch or
    --seq" would name no remedy. Where ``beside`` alone does not fit either, check_fits says so."""
    budget = int(HEADROOM * free) - beside
    if table <= budget or budget <= 0:
        return
    most = budget * positions // table  # the table grows linearly with the positions
    raise UserError(
        f"{name}: {field}={positions} needs {table / GB:.3g} GB of {what} but the {device.type} has {free / GB:.3g} GB "
        f"free beside {beside / GB:.3g} GB of {beside_what}; valid: {field} of at most {most} here"
    )


def check_fits(what: str, need: MemoryNeed, free: int, device: torch.device, lower: str) -> None:
    why = refusal(what, need, free, device, lower)
    if why:
        raise UserError(why)
