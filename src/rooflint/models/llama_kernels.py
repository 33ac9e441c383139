"""Kernel sets for the Llama family: the slots models/llama.py calls, on top of kernel_sets' sets.

eager is Hugging Face's Llama as PyTorch ops (its RMSNorm in fp32, SDPA with grouped-query
attention); compile is that code under torch.compile; triton swaps in rooflint's families where
they exist and fit: rmsnorm (with the residual add fused), swiglu, attention (prefill),
kv_cache (append) and decode_attention (GQA over the paged cache), and the weight-streaming GEMM
for a decode step's projections. Each slot that stays PyTorch says why in the plan line.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rooflint.core.errors import UserError, VariantSkipped
from rooflint.core.family import dtype_name
from rooflint.models.cache import KVCache
from rooflint.models.kernel_sets import CompileKernels, EagerKernels, TritonKernels, _dtype_gap

LLAMA_SETS = ("eager", "triton", "cuda", "compile")
PLAN_SLOTS = ("rms_norm", "rope", "prefill_attention", "kv_append", "decode_attention", "swiglu", "linear", "lm_head",
              "sample")  # fmt: skip


class LlamaSlots:
    """The Llama slots in PyTorch, as Hugging Face's modeling_llama computes them."""

    eps: float

    def token_embedding(self, ids, table):
        return F.embedding(ids, table).view(ids.numel(), -1)

    def rms_norm(self, x, w, residual=None):
        """(w * normalize(h), h) with h = x + residual (or x): HF's LlamaRMSNorm, the norm in fp32."""
        h = x if residual is None else residual + x
        wide = h.float()
        wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * wide.to(h.dtype), h

    def rope(self, q, k, cos, sin):
        """Rotate q [B, T, H, D] and k [B, T, H_kv, D] by positions' cos/sin [T, D] (rotate-half form)."""
        cos, sin = cos[:, None, :], sin[:, None, :]
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin

    def gate_up(self, h, w, b, ffn):
        """(gate, up), each [rows, ffn], from one GEMM over the concatenated weight (views of its output)."""
        y = F.linear(h, w, b)
        return y[:, :ffn], y[:, ffn:]

    def silu_mul(self, gate, up):
        return F.silu(gate) * up

    def attend_prefill_gqa(self, q, k, v):
        """Causal attention, q [B, H, T, D], k and v [B, H_kv, T, D]; returns [B, H, T, D]."""
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])

    def attend_decode_gqa(self, q, cache: KVCache, layer: int, length: int):
        """One query [B, H, 1, D] against the first ``length`` cached tokens [B, H_kv, length, D]."""
        k, v = cache.view(layer, length)
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])

    def fusions(self, rows, decoding):
        return frozenset()  # no GPT-2 fused slot (norm_linear, ...) applies to the Llama block

    def _llama_plan(self) -> None:
        self.plan = {slot: "eager" for slot in PLAN_SLOTS}


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaEager(LlamaSlots, EagerKernels):
    name = "eager"

    def __init__(self, dtype, device, head_dim, eps) -> None:
        super().__init__(dtype, device, head_dim, eps)
        self._llama_plan()


class LlamaCompile(LlamaSlots, CompileKernels):
    name = "compile"

    def __init__(self, dtype, device, head_dim, eps) -> None:
        super().__init__(dtype, device, head_dim, eps)
        self._llama_plan()


class LlamaTriton(LlamaSlots, TritonKernels):
    """rooflint's Triton families in the Llama slots where the family has the dtype and shape."""

    name = "triton"

    def __init__(self, dtype, device, head_dim, eps) -> None:
        super().__init__(dtype, device, head_dim, eps)  # raises VariantSkipped without Triton or a GPU
        linear = self.plan["linear"]
        self._llama_plan()
        from rooflint.kernels import attention, decode_attention, rmsnorm, swiglu

        name = dtype_name(dtype)
        power_of_two = head_dim >= 16 and head_dim & (head_dim - 1) == 0
        families = {"rms_norm": rmsnorm.FAMILY, "swiglu": swiglu.FAMILY, "prefill_attention": attention.FAMILY,
                    "decode_attention": decode_attention.FAMILY}  # fmt: skip
        for slot, family in families.items():
            why = _dtype_gap(family, name)
            if why is None and slot.endswith("attention") and not power_of_two:
                why = f"head_dim {head_dim} is not a power of two >= 16"
            self.plan[slot] = "triton" if why is None else f"eager ({why})"
        if self.plan["prefill_attention"] == "triton":
            self.plan["prefill_attention"] = "triton (K and V repeated to the query heads: the kernel has no GQA)"
        self.plan["kv_append"] = "triton"
        self.plan["rope"] = "eager (the rope family's kernel rotates q and k of one head count, dense rows)"
        self.plan["linear"] = linear
        self.plan["lm_head"] = "cuBLAS, vocab padded to whole tiles"
        self.plan["sample"] = "triton (argmax in one kernel)"

    def rms_norm(self, x, w, residual=None):
        if self.plan["rms_norm"] != "triton":
            return super().rms_norm(x, w, residual)
        from rooflint.kernels.rmsnorm.triton import triton_rmsnorm

        y = torch.empty_like(x)
        if residual is None:
            return triton_rmsnorm(x, w, y, eps=self.eps), x
        return triton_rmsnorm(x, w, y, residual, torch.empty_like(x), eps=self.eps)

    def silu_mul(self, gate, up):
        if self.plan["swiglu"] != "triton":
            return super().silu_mul(gate, up)
        from rooflint.kernels.swiglu.triton import triton_swiglu

        # gate and up are the two column halves of one GEMM's output: the kernel reads them strided
        return triton_swiglu(gate, up, torch.empty(gate.shape, dtype=gate.dtype, device=gate.device))

    def attend_prefill_gqa(self, q, k, v):
        if self.plan["prefill_attention"].startswith("eager"):
            return super().attend_prefill_gqa(q, k, v)
        group = q.shape[1] // k.shape[1]
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        from rooflint.kernels.attention.triton import triton_attention

        b, h, t, d = q.shape
        out = torch.empty((b, t, h, d), dtype=q.dtype, device=q.device)  # token-major: o_proj reads a view
        return triton_attention(q, k, v, True, out.transpose(1, 2))

    def attend_decode_gqa(self, q, cache, layer, length):
        if self.plan["decode_attention"] != "triton":
            return super().attend_decode_gqa(q, cache, layer, length)
        return self.attend_decode(q, cache, layer, length)


def make_llama_kernel_set(name: str, dtype: torch.dtype, device: torch.device, head_dim: int, eps: float):
    """The Llama kernel set ``name``; raises VariantSkipped where it cannot run here."""
    classes = {"eager": LlamaEager, "compile": LlamaCompile, "triton": LlamaTriton}
    if name == "cuda":
        raise VariantSkipped("no CUDA C++ kernels for the Llama family's ops (RMSNorm, RoPE, SwiGLU) yet")
    if name not in classes:
        raise UserError(f"unknown kernel set {name!r}; valid: {', '.join(LLAMA_SETS)}")
    return classes[name](dtype, device, head_dim, eps)
