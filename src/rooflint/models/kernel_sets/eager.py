"""The eager set: PyTorch ops as Hugging Face runs them, and the base every other set overrides.

Its slots are what a set falls back to where its kernels do not fit, and the ops no family covers
(plain GEMMs, embedding, residual adds) stay these in every set but the triton set's decode GEMMs.
Eager fuses nothing (``fusions`` is empty): its ``norm_linear`` runs the layer norm, the GEMM and the
cache append one by one, which is what a fusing set falls back to where it does not fuse.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rooflint.models.cache import KVCache
from rooflint.models.kernel_sets.common import SLOTS, kv_span


def _heads(qkv: torch.Tensor, batch: int, tokens: int, heads: int) -> torch.Tensor:
    """[B*T, 3*H*D] -> [B, T, 3, H, D] view (GPT-2's fused QKV order: all of q, then k, then v)."""
    return qkv.view(batch, tokens, 3, heads, -1)


def _kv_columns(qkv: torch.Tensor, cache: KVCache) -> tuple[torch.Tensor, torch.Tensor]:
    """The new K and V rows [rows * kv_heads, head_dim] of a QKV output [rows, (H + 2 H_kv) D],
    ordered (row, kv head) as cache.slots() numbers them."""
    q_width, width = kv_span(qkv.shape[1], cache)
    k = qkv[:, q_width : q_width + width].reshape(-1, cache.head_dim)
    v = qkv[:, q_width + width :].reshape(-1, cache.head_dim)
    return k, v


class EagerKernels:
    """PyTorch ops, as Hugging Face's GPT-2 runs them with SDPA attention."""

    name = "eager"
    compiled = False  # the runner wraps steps in torch.compile when True

    def __init__(self, dtype: torch.dtype, device: torch.device, head_dim: int, eps: float) -> None:
        self.dtype, self.device, self.head_dim, self.eps = dtype, device, head_dim, eps
        self.plan = {slot: "eager" for slot in SLOTS}

    def describe(self) -> str:
        return "; ".join(f"{slot}={how}" for slot, how in self.plan.items())

    # ---- ops every set runs in PyTorch ----------------------------------------------------
    def embedding(self, ids, start, wte, wpe):
        batch, tokens = ids.shape
        return (F.embedding(ids, wte) + wpe[start : start + tokens]).view(batch * tokens, -1)

    def linear(self, x, w, b, residual=None):
        y = F.linear(x, w, b)
        return y if residual is None else residual + y

    def add(self, a, b):
        return a + b

    def prepare(self, weights) -> None:
        """Given the model's weights before the first forward, for a set whose fusions depend on a
        weight's shape (the Llama triton set's gate_up_swiglu); nothing here."""

    def fusions(self, rows: int, decoding: bool) -> frozenset[str]:
        """Which of FUSIONS this set applies to a forward of ``rows`` token rows (a decode step when
        ``decoding``); the forward runs the fused slots below only for these."""
        return frozenset()

    def phase_shares(self) -> dict[str, tuple[float, int]] | None:
        """{fused op: (share of the persistent kernel's time, calls)} of the last decoder_layers
        call, or None where the set has no such kernel or it kept no clock."""
        return None

    def norm_linear(self, x, ln_w, ln_b, w, b, gelu=False, append=None):
        """linear(layer_norm(x)) (+GELU) in one slot; ``append`` = (cache, layer, position) also
        writes the output's K and V columns into the cache (a QKV projection of a decode step)."""
        h = self.layer_norm(x, ln_w, ln_b)
        y = self.linear_gelu(h, w, b) if gelu else self.linear(h, w, b)
        if append is not None:
            cache, layer, position = append
            k, v = _kv_columns(y, cache)
            self.kv_append(cache, layer, k, v, cache.slots(position, 1))
        return y

    # ---- swappable slots ------------------------------------------------------------------
    def layer_norm(self, x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b, self.eps)

    def linear_gelu(self, x, w, b):
        return F.gelu(F.linear(x, w, b), approximate="tanh")

    def lm_head(self, x, w):
        return F.linear(x, w)

    def sample(self, logits, tokens, token):
        """Greedy: tokens[:, 0] = token[:, 0] = argmax of each row of logits [B, V] (int64 column
        views [B, 1]; ``tokens`` is the step's column of the generated-token matrix)."""
        chosen = logits.argmax(-1, keepdim=True)
        tokens.copy_(chosen)
        token.copy_(chosen)

    def kv_append(self, cache: KVCache, layer: int, k_rows, v_rows, slots):
        k_pool, v_pool = cache.rows(layer)
        k_pool.index_copy_(0, slots, k_rows)
        v_pool.index_copy_(0, slots, v_rows)

    def attend_prefill(self, q, k, v):
        """Causal attention over [B, H, T, D] (strided views of the QKV output); returns [B, H, T, D],
        ideally a transposed [B, T, H, D] buffer, so that the rows [B*T, H*D] are a view, not a copy."""
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def attend_decode(self, q, cache: KVCache, layer: int, length: int):
        """One query [B, H, 1, D] (a view of the QKV output) against the first ``length`` cached
        tokens of ``layer``, read in place; returns [B, H, 1, D]."""
        k, v = cache.view(layer, length)  # [B, H, length, D] views strided by the capacity
        return F.scaled_dot_product_attention(q, k, v)

    # ---- attention, shared plumbing --------------------------------------------------------
    def prefill_attention(self, qkv, batch, tokens, heads, cache: KVCache | None, layer: int):
        """[B*T, 3d] -> [B*T, d]: causal attention over the tokens, appending K and V to the cache."""
        split = _heads(qkv, batch, tokens, heads)
        if cache is not None:
            d = split.shape[-1]
            self.kv_append(
                cache, layer, split[:, :, 1].reshape(-1, d), split[:, :, 2].reshape(-1, d), cache.slots(0, tokens)
            )
        q, k, v = (split[:, :, i].transpose(1, 2) for i in range(3))
        return self.attend_prefill(q, k, v).transpose(1, 2).reshape(batch * tokens, -1)

    def decode_attention(self, qkv, batch, heads, cache: KVCache, layer: int, position: int, appended=False):
        """[B, 3d] for the token at ``position`` -> [B, d], after appending its K and V (unless the
        QKV projection already did: the ``kv_append`` fusion)."""
        split = _heads(qkv, batch, 1, heads)
        if not appended:
            k, v = _kv_columns(qkv, cache)
            self.kv_append(cache, layer, k, v, cache.slots(position, 1))
        q = split[:, :, 0].transpose(1, 2)  # [B, H, 1, D]
        return self.attend_decode(q, cache, layer, position + 1).reshape(batch, -1)
