"""The KV cache of a greedy generation, in the kv_cache family's paged pool format.

Each layer has a K pool and a V pool of 16-token pages, each page holding one (sequence, head)'s
rows: [pages, 16, 1, head_dim], as kv_cache's append kernel writes them (one "head" per page, so a
row is one head's head_dim values). New tokens are scattered into their slots (vLLM's slot
mapping) by the kernel set's append.

The pages of one (sequence, head) are allocated consecutively, so the block table is the identity
and a pool also reads as a [B, H, capacity, D] tensor. Decode attention reads the cache in place
either way: the Triton set through the block table (decode_attention.triton_paged_decode), the
CUDA set and SDPA as the first `length` rows of that dense view (strided by the capacity).
"""

from __future__ import annotations

import torch

from rooflint.kernels.kv_cache import BLOCK_SIZE


class KVCache:
    def __init__(
        self, layers: int, batch: int, kv_heads: int, head_dim: int, capacity: int, dtype: torch.dtype, device
    ) -> None:
        self.batch, self.kv_heads, self.head_dim = batch, kv_heads, head_dim
        self.capacity = -(-capacity // BLOCK_SIZE) * BLOCK_SIZE  # whole pages
        self.pages = batch * kv_heads * self.capacity // BLOCK_SIZE
        shape = (self.pages, BLOCK_SIZE, 1, head_dim)
        # One tensor per pool for all layers, [L, pages, 16, 1, D], each layer a view: a persistent
        # kernel that runs every layer (models/ops/decode_layers.py) walks layers by an offset.
        self.k_layers = torch.zeros((layers, *shape), dtype=dtype, device=device)
        self.v_layers = torch.zeros((layers, *shape), dtype=dtype, device=device)
        self.k = list(self.k_layers.unbind(0))
        self.v = list(self.v_layers.unbind(0))
        per_head = self.capacity // BLOCK_SIZE
        # block_table[b * H + h, p]: the page holding tokens 16p..16p+15 of (sequence b, head h).
        self.block_table = torch.arange(self.pages, dtype=torch.int32, device=device).view(-1, per_head)
        self._slots: dict[tuple[int, int], torch.Tensor] = {}
        # Under torch.compile a step's position is symbolic: slots are then computed as the
        # position-0 slots plus the position, instead of looked up (a lookup would recompile per step).
        self.symbolic = False
        self._lookup(0, 1)  # built here, not first inside a compiled step (a new key would recompile it)

    def slots(self, start: int, tokens: int) -> torch.Tensor:
        """int64 slot of each new row, rows ordered (sequence, token, head) as the QKV output holds them.

        Built once per (start, tokens) and kept, so a captured CUDA graph reads a tensor that lives on.
        """
        if self.symbolic:
            return self._lookup(0, tokens) + start
        return self._lookup(start, tokens)

    def _lookup(self, start: int, tokens: int) -> torch.Tensor:
        key = (start, tokens)
        if key not in self._slots:
            device = self.k[0].device
            b = torch.arange(self.batch, device=device)[:, None, None]
            t = torch.arange(start, start + tokens, device=device)[None, :, None]
            h = torch.arange(self.kv_heads, device=device)[None, None, :]
            # page of (b, h, t) = (b * H + h) * pages_per_head + t // 16, slot = page * 16 + t % 16
            self._slots[key] = ((b * self.kv_heads + h) * self.capacity + t).reshape(-1)
        return self._slots[key]

    def view(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of the first ``length`` positions as [B, H, length, D] views (strided: no copy)."""
        shape = (self.batch, self.kv_heads, self.capacity, self.head_dim)
        return self.k[layer].view(shape)[:, :, :length], self.v[layer].view(shape)[:, :, :length]

    def pools(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The K and V pools as stored, [pages, 16, 1, D]: what block_table indexes."""
        return self.k[layer], self.v[layer]

    def rows(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The pools as [slots, D]: what an append writes into."""
        return self.k[layer].view(-1, self.head_dim), self.v[layer].view(-1, self.head_dim)
