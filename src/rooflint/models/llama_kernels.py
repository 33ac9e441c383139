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
from rooflint.core.switches import choice
from rooflint.models import quantized_weights
from rooflint.models.cache import KVCache
from rooflint.models.kernel_sets import ALL_SETS, CompileKernels, EagerKernels, TritonKernels, dtype_gap

# ROOFLINT_NORM_IN_GEMM=attn, mlp or both folds those RMSNorms into the decode GEMMs after them in the
# triton set's decode steps (attn_norm_in_qkv, mlp_norm_in_gate_up). Off by default: on H200s it took
# Llama-3.2-1B's step (B=8) faster and Llama-3.1-8B's (B=1) slower, the QKV GEMM there taking back the
# norm's time (docs/perf-notes/models.md has the numbers).
NORM_IN_GEMM = "ROOFLINT_NORM_IN_GEMM"
NORM_FOLDS = {None: (), "0": (), "attn": ("attn",), "mlp": ("mlp",), "both": ("attn", "mlp")}
PLAN_SLOTS = ("rms_norm", "rope", "prefill_attention", "kv_append", "decode_attention", "swiglu", "linear", "lm_head",
              "sample")  # fmt: skip


def norm_folds() -> tuple[str, ...]:
    """The norms ROOFLINT_NORM_IN_GEMM asks to fold: "attn", "mlp" (core/switches.py refuses other values)."""
    return NORM_FOLDS[choice(NORM_IN_GEMM)]


class LlamaSlots:
    """The Llama slots in PyTorch, as Hugging Face's modeling_llama computes them."""

    eps: float
    # {bf16 weight's data pointer: its int8/fp8 form} with --weights-dtype (models/quantized_weights.py)
    quantized: dict = {}
    gate_up_quantized = None  # the first layer's gate/up weight quantized: what decides fusions()
    qkv_quantized = None  # the first layer's QKV weight quantized: what decides qkv_rope with quantized weights
    gate_up_w = None  # the first layer's gate/up weight (prepare): what decides fusions() without quantization
    qkv_w = None  # the first layer's QKV weight and (heads, kv_heads, head_dim) (prepare): what decides qkv_rope
    rope_dims = None

    def prepare(self, weights) -> None:
        self.gate_up_w = weights.layers[0].gate_up_w
        self.qkv_w = weights.layers[0].qkv_w
        self.rope_dims = (weights.heads, weights.kv_heads, weights.head_dim)

    def _quantized(self, rows: int, w):
        """w's quantized form where the set holds one and ``rows`` are a decode step's; else None."""
        return self.quantized.get(w.data_ptr()) if self.quantized and rows <= quantized_weights.MAX_ROWS else None

    def linear(self, x, w, b, residual=None):
        """A decode step's projection on its quantized weight where the set holds one; else the set's own."""
        q = self._quantized(x.shape[0], w)
        if q is None:
            return super().linear(x, w, b, residual)
        return quantized_weights.quantized_linear(self.name, x, q, b, residual)

    def lm_head(self, x, w):
        """The head on its quantized weight for a decode step's rows where the set holds one."""
        q = self._quantized(x.shape[0], w)
        if q is None:
            return super().lm_head(x, w)
        return quantized_weights.quantized_linear(self.name, x, q)

    def fusions(self, rows, decoding):
        """In a decode step: gate_up_swiglu where the gate/up GEMM's kernel writes silu(gate) * up itself,
        qkv_rope where the QKV GEMM's kernel rotates q and K and appends K and V itself. In a prefill:
        gate_up_swiglu where the set's prefill GEMM has the same epilogue."""
        if not decoding:
            return frozenset({"gate_up_swiglu"}) if self._swiglu_in_prefill_gemm(rows) else frozenset()
        fused = {"gate_up_swiglu": self._swiglu_in_gemm, "qkv_rope": self._rope_in_gemm,
                 "attn_norm_in_qkv": self._attn_norm_in_gemm,
                 "mlp_norm_in_gate_up": self._mlp_norm_in_gemm}  # fmt: skip
        return frozenset(name for name, fuses in fused.items() if fuses(rows))

    def _swiglu_in_prefill_gemm(self, rows) -> bool:
        """Whether the set's prefill gate/up GEMM writes silu(gate) * up itself: only the triton set's."""
        return False

    FUSED = {"qkv_rope": "RoPE and the K/V append in the QKV GEMM's epilogue: no rope kernel",
             "gate_up_swiglu": "silu(gate) * up in the gate/up GEMM's epilogue: no swiglu kernel",
             "attn_norm_in_qkv": "the attention's RMSNorm folded into the QKV GEMM, the residual add in the down "
                                 "GEMM's epilogue: no norm kernel before QKV",
             "mlp_norm_in_gate_up": "the MLP's RMSNorm folded into the gate/up GEMM, the residual add in the o "
                                    "GEMM's epilogue: no norm kernel before gate/up"}  # fmt: skip

    def describe(self) -> str:
        lines = []
        for name, what in self.FUSED.items():
            rows = [m for m in range(1, quantized_weights.MAX_ROWS + 1) if name in self.fusions(m, True)]
            if rows:
                lines.append(f"{name} at <= {rows[-1]} decode rows ({what})")
        if self._swiglu_in_prefill_gemm(quantized_weights.MAX_ROWS + 1):
            lines.append("gate_up_swiglu in prefill (the TMA GEMM's epilogue: gate and up never reach HBM)")
        if lines:
            self.plan["fusions"] = ", ".join(lines)  # "; " separates the slots
        return super().describe()

    def _rope_in_gemm(self, rows) -> bool:
        """Whether the set's QKV GEMM rotates q and K itself at ``rows``: only the triton set's can."""
        return False

    def _attn_norm_in_gemm(self, rows) -> bool:
        """Whether the set's QKV GEMM normalizes the residual stream itself at ``rows`` (the
        attn_norm_in_qkv fusion): only the triton set's can."""
        return False

    def _mlp_norm_in_gemm(self, rows) -> bool:
        """Whether the set's gate/up GEMM normalizes the residual stream itself at ``rows`` (the
        mlp_norm_in_gate_up fusion): only the triton set's can."""
        return False

    def qkv_rope(self, h, w, b, batch, tokens, weights, start, cache, layer, gamma=None):
        """rope_append's q, k and v of the QKV projection of h (the qkv_rope fusion's slot): the
        projection, then rope_append, where the set fuses nothing. ``gamma``: h is the residual stream,
        normalized first with this RMSNorm weight (attn_norm_in_qkv)."""
        qkv = self.linear(h, w, b) if gamma is None else self.rms_linear(h, gamma, w, b)
        return self.rope_append(qkv, batch, tokens, weights, start, cache, layer)

    def rms_linear(self, x, gamma, w, b):
        """The projection of RMSNorm(x) * gamma (a folded norm's slot): here the norm, then the GEMM."""
        return self.linear(self.rms_norm(x, gamma)[0], w, b)

    def _swiglu_in_gemm(self, rows) -> bool:
        """The quantized decode step of the triton set, where the CUDA weight-only kernel takes the shape."""
        return bool(self.quantized) and quantized_weights.swiglu_in_gemm(self.name, rows, self.gate_up_quantized)

    def gate_up_swiglu(self, h, w, b, gamma=None):
        """silu(gate) * up [rows, ffn] in the gate/up projection's kernel (the gate_up_swiglu fusion); a
        quantized weight's, which folds no norm (``gamma`` normalizes h first)."""
        h = h if gamma is None else self.rms_norm(h, gamma)[0]
        return quantized_weights.quantized_swiglu(h, self._quantized(h.shape[0], w), b)

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

    def rope_append(self, qkv, batch, tokens, weights, start, cache, layer):
        """q [B, T, H, D], k and v [B, T, H_kv, D] from the QKV output, q and k rotated for
        positions start.., and with ``cache`` the new K and V appended to ``layer``'s pages."""
        cos, sin = (table.narrow(0, start, tokens) for table in weights.rope_tables_for(start, tokens))
        q, k, v = split_heads(qkv, batch, tokens, weights)
        q, k = self.rope(q, k, cos, sin)
        if cache is not None:
            d = weights.head_dim
            self.kv_append(cache, layer, k.reshape(-1, d), v.reshape(-1, d), cache.slots(start, tokens))
        return q, k, v

    def gate_up(self, h, w, b, ffn, gamma=None):
        """(gate, up), each [rows, ffn], from one GEMM over the concatenated weight (views of its output).
        ``gamma``: h is the residual stream, normalized first with this RMSNorm weight (mlp_norm_in_gate_up)."""
        y = self.linear(h, w, b) if gamma is None else self.rms_linear(h, gamma, w, b)
        return y[:, :ffn], y[:, ffn:]

    def silu_mul(self, gate, up):
        return F.silu(gate) * up

    def attend_prefill_gqa(self, q, k, v):
        """Causal attention, q [B, H, T, D], k and v [B, H_kv, T, D]; returns [B, H, T, D]."""
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])

    def attend_decode_gqa(self, q, cache: KVCache, layer: int, length: int):
        """One query [B, H, 1, D] against the first ``length`` cached tokens [B, H_kv, length, D]."""
        k, v = cache.view(layer, length)
        batch, heads, _, d = q.shape
        # The query heads of one kv head as that kv head's rows: [B, H_kv, H / H_kv, D], head i on
        # kv head i // group as repeat_kv maps it. With one new token per sequence this is exact
        # GQA with no enable_gqa flag, which under torch.compile(dynamic=True) would be a SymBool
        # (the head counts are symbolic there) and SDPA takes none: a graph break that split the
        # compiled step into per-layer frames, each recompiled for its layer index.
        grouped = q.reshape(batch, cache.kv_heads, -1, d)
        return F.scaled_dot_product_attention(grouped, k, v).reshape(batch, heads, 1, d)

    def _llama_plan(self) -> None:
        self.plan = {slot: "eager" for slot in PLAN_SLOTS}


def split_heads(qkv, batch: int, tokens: int, weights):
    """q [B, T, H, D], k and v [B, T, H_kv, D]: views of a QKV output [B*T, (H + 2 H_kv) D]."""
    heads, kv_heads, d = weights.heads, weights.kv_heads, weights.head_dim
    q_width, kv_width = heads * d, kv_heads * d
    return (qkv[:, :q_width].view(batch, tokens, heads, d),
            qkv[:, q_width : q_width + kv_width].view(batch, tokens, kv_heads, d),
            qkv[:, q_width + kv_width :].view(batch, tokens, kv_heads, d))  # fmt: skip


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
            why = dtype_gap(family, name)
            if why is None and slot.endswith("attention") and not power_of_two:
                why = f"head_dim {head_dim} is not a power of two >= 16"
            self.plan[slot] = "triton" if why is None else f"eager ({why})"
        if self.plan["prefill_attention"] == "triton":
            self.plan["prefill_attention"] = "triton (K and V repeated to the query heads: the kernel has no GQA)"
        # RoPE and the cache append are one kernel (models/ops/rope_append.py); "kv_append" names
        # where the append runs
        if head_dim & (head_dim - 1) == 0:
            self.plan["rope"] = "triton (q and k rotated in place in the QKV output, one kernel a layer)"
            self.plan["kv_append"] = "triton (in the rope kernel: the rotated K and V written to their pages)"
        else:
            self.plan["rope"] = f"eager (head_dim {head_dim} is not a power of two)"
            self.plan["kv_append"] = "triton"
        if self.plan["prefill_attention"] == "triton":
            self.plan["prefill_attention"] = "triton (GQA: each query head reads its kv head in place)"
        self.plan["linear"] = linear.replace("decode (", "decode: qkv, o, gate/up and down projections (")
        self.plan["lm_head"] = "cuBLAS (vocab a multiple of 128 here: no padded copy)"
        self.plan["sample"] = "triton (argmax in one kernel)"

    def rope_append(self, qkv, batch, tokens, weights, start, cache, layer):
        if not self.plan["rope"].startswith("triton"):
            return super().rope_append(qkv, batch, tokens, weights, start, cache, layer)
        from rooflint.models.ops.rope_append import rope_append

        heads, kv_heads, d = weights.heads, weights.kv_heads, weights.head_dim
        append = None
        if cache is not None:
            append = (cache.slots(start, tokens), *cache.rows(layer))
        rope_append(qkv, *weights.rope_tables_for(start, tokens), tokens, start, heads, kv_heads, d, append)
        return split_heads(qkv, batch, tokens, weights)

    def _rope_in_gemm(self, rows) -> bool:
        """skinny_pdl.cu's held kernel with RoPE and the K/V append in its epilogue, where the decode GEMM
        streams these rows in bf16 or fp16, the set's rope is its own and the kernel splits the QKV
        weight's K (Llama-3.2-1B at <= 16 rows, Llama-3.1-8B at <= 8); with quantized weights, the CUDA
        weight-only kernel's same epilogue where it takes the quantized QKV weight."""
        if not self.plan.get("rope", "").startswith("triton"):  # unset while the base class builds its plan
            return False
        if self.quantized:
            return quantized_weights.rope_in_gemm(self.name, rows, self.qkv_quantized, self.rope_dims)
        if self.qkv_w is None or not self._streams(rows):
            return False
        from rooflint.kernels.gelu_linear import skinny_pdl

        heads, kv_heads, d = self.rope_dims
        return skinny_pdl.why_not_rope(rows, self.qkv_w, (heads + kv_heads) * d, d) is None

    def _folds_norm(self, rows) -> bool:
        """What both norm folds need: the set's norm its own, 16-bit weights, at most 8 rows, and
        skinny_pdl.cu's held kernel (the only kernel that scales by 1 / rms), which the QKV GEMM's RoPE
        epilogue runs on where it can run at all (sm_80, nvcc). Whether PDL is on does not matter: the
        plan line is written outside the decode step, where it is off."""
        if self.quantized or self.qkv_w is None or not self._streams(rows) or self.plan["rms_norm"] != "triton":
            return False
        return rows <= 8 and self._rope_in_gemm(rows)

    def _attn_norm_in_gemm(self, rows) -> bool:
        """The attention's RMSNorm folded into the QKV GEMM (its RoPE epilogue on the held kernel)."""
        return "attn" in norm_folds() and self._folds_norm(rows)

    def _mlp_norm_in_gemm(self, rows) -> bool:
        """The MLP's RMSNorm folded into the gate/up GEMM (its SwiGLU epilogue, or the plain held kernel)."""
        if "mlp" not in norm_folds() or not self._folds_norm(rows) or self._ring_swiglu(rows):
            return False
        from rooflint.kernels.gelu_linear import skinny_pdl

        n, k = self.gate_up_w.shape
        swiglu = self._swiglu_in_gemm(rows)
        return skinny_pdl.takes_rms(rows, k, n // 2 if swiglu else n, self.gate_up_w.device, swiglu=swiglu)

    def _rms_folded(self, w, gamma):
        """(W diag(gamma), the held kernel's ``rms`` eps) where the norm is fused (gamma given), else (w,
        None); each folded weight made once, on the first (uncaptured) step."""
        if gamma is None:
            return w, None
        from rooflint.kernels.gelu_linear import skinny_pdl

        key = ("rms_norm", w.data_ptr(), gamma.data_ptr())
        return self.folded_once(key, lambda: skinny_pdl.fold_rms_norm(gamma, w)), self.eps

    def rms_linear(self, x, gamma, w, b):
        if not self._folds_norm(x.shape[0]):
            return super().rms_linear(x, gamma, w, b)
        from rooflint.kernels.common.pdl import pdl_enabled
        from rooflint.kernels.gelu_linear import skinny_pdl

        folded, eps = self._rms_folded(w, gamma)
        out = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
        return skinny_pdl.launch(x, folded, b, False, None, out, None, None, rms=eps, pdl=pdl_enabled(x.device))

    def qkv_rope(self, h, w, b, batch, tokens, weights, start, cache, layer, gamma=None):
        from rooflint.kernels.common.pdl import pdl_enabled
        from rooflint.kernels.gelu_linear import skinny, skinny_pdl

        heads, kv_heads, d = weights.heads, weights.kv_heads, weights.head_dim
        q_width, kv_width = heads * d, kv_heads * d
        append = None
        if cache is not None:
            k_rows, v_rows = cache.rows(layer)
            append = skinny.KVAppend(k_rows, v_rows, cache.slots(start, tokens), q_width, kv_heads, d)
        cos, sin = weights.rope_tables_for(start, tokens)
        q = self._quantized(h.shape[0], w)
        if q is not None:  # folds no norm (_folds_norm): gamma normalizes h first
            h = h if gamma is None else self.rms_norm(h, gamma)[0]
            qkv = quantized_weights.quantized_qkv_rope(h, q, b, cos, sin, start, tokens, q_width + kv_width, d, append)
        else:
            w, rms = self._rms_folded(w, gamma)
            qkv = skinny_pdl.qkv_rope(h, w, b, cos, sin, start, tokens, q_width + kv_width, d, append,
                                      pdl=pdl_enabled(h.device), rms=rms)  # fmt: skip
        return split_heads(qkv, batch, tokens, weights)

    def _swiglu_in_gemm(self, rows) -> bool:
        """Quantized: the weight-only kernel's SwiGLU epilogue. Else skinny_pdl.cu's held kernel with the
        same epilogue, where the decode GEMM streams these rows and it splits the gate/up weight's K
        (a 16-warp block holds 2 x 16 rows of K = 2048: Llama-3.2-1B, not the 8B's 4096)."""
        if self.quantized:
            return super()._swiglu_in_gemm(rows)
        if self.gate_up_w is None or not self._streams(rows):
            return False
        from rooflint.kernels.gelu_linear import skinny_pdl

        return self._ring_swiglu(rows) or skinny_pdl.why_not_swiglu(rows, self.gate_up_w) is None

    def _ring_swiglu(self, rows) -> bool:
        """The gate/up projection with its SwiGLU epilogue on skinny_ring.cu, where that kernel pays for a
        decode step's 16-bit weight."""
        w = self.gate_up_w
        if self.quantized or w is None or not self._streams(rows) or w.dtype not in (torch.float16, torch.bfloat16):
            return False
        from rooflint.kernels.gelu_linear import skinny_ring

        return skinny_ring.pays(rows, w.shape[1], w.shape[0], w.device)

    def _swiglu_in_prefill_gemm(self, rows) -> bool:
        """swiglu/triton_gemm.py's GEMM with the SwiGLU epilogue, above the decode GEMMs' rows, where the
        set's swiglu is its own and the GEMM takes the weight (16-bit, TMA-aligned, sm_90)."""
        if self.gate_up_w is None or self._streams(rows) or self.plan["swiglu"] != "triton":
            return False
        from rooflint.kernels.swiglu import triton_gemm

        return triton_gemm.why_not_weight(self.gate_up_w) is None

    def gate_up_swiglu(self, h, w, b, gamma=None):
        if self._quantized(h.shape[0], w) is not None:
            return super().gate_up_swiglu(h, w, b, gamma)
        if not self._streams(h.shape[0]):  # a prefill's rows: the TMA GEMM (_swiglu_in_prefill_gemm)
            from rooflint.kernels.swiglu.triton_gemm import gemm_swiglu

            return gemm_swiglu(h, w, b)
        from rooflint.kernels.common.pdl import pdl_enabled
        from rooflint.kernels.gelu_linear import skinny_pdl

        if self._ring_swiglu(h.shape[0]):  # folds no norm (_mlp_norm_in_gemm): gamma normalizes h first
            from rooflint.kernels.gelu_linear import skinny_ring

            h = h if gamma is None else self.rms_norm(h, gamma)[0]
            return skinny_ring.swiglu(h, w, b, pdl=pdl_enabled(h.device))
        w, rms = self._rms_folded(w, gamma)
        return skinny_pdl.swiglu(h, w, b, pdl=pdl_enabled(h.device), rms=rms)

    def gate_up(self, h, w, b, ffn, gamma=None):
        """A decode step's gate/up projection on the weight-streaming GEMM (with PDL on sm_90),
        like the other projections; cuBLAS above its rows."""
        if not self._streams(h.shape[0]):
            return super().gate_up(h, w, b, ffn, gamma)
        y = self.linear(h, w, b) if gamma is None else self.rms_linear(h, gamma, w, b)
        return y[:, :ffn], y[:, ffn:]

    def rms_norm(self, x, w, residual=None):
        if self.plan["rms_norm"] != "triton":
            return super().rms_norm(x, w, residual)
        from rooflint.kernels.common.pdl import pdl_enabled
        from rooflint.kernels.rmsnorm.triton import triton_rmsnorm

        y = torch.empty_like(x)
        # In a decode step, a link of its PDL chain as the GEMMs are: the GEMM after the norm loads its
        # weights while the norm waits and runs (Llama-3.1-8B's step 5% faster on an H200).
        pdl = pdl_enabled(x.device)
        if residual is None:
            return triton_rmsnorm(x, w, y, eps=self.eps, pdl=pdl), x
        return triton_rmsnorm(x, w, y, residual, torch.empty_like(x), eps=self.eps, pdl=pdl)

    def silu_mul(self, gate, up):
        if self.plan["swiglu"] != "triton":
            return super().silu_mul(gate, up)
        from rooflint.kernels.swiglu.triton import triton_swiglu

        # gate and up are the two column halves of one GEMM's output: the kernel reads them strided.
        # A plain launch, not a link of the PDL chain: the streamed down projection let in early
        # behind it ran 24% slower in Llama-3.1-8B's step (docs/perf-notes/models.md).
        return triton_swiglu(gate, up, torch.empty(gate.shape, dtype=gate.dtype, device=gate.device))

    def attend_prefill_gqa(self, q, k, v):
        if self.plan["prefill_attention"].startswith("eager"):
            return super().attend_prefill_gqa(q, k, v)
        from rooflint.kernels.attention.triton import triton_attention

        b, h, t, d = q.shape
        out = torch.empty((b, t, h, d), dtype=q.dtype, device=q.device)  # token-major: o_proj reads a view
        # GQA: query head i reads kv head i // group of the strided K and V views, nothing repeated
        return triton_attention(q, k, v, True, out.transpose(1, 2), group=h // k.shape[1])

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
        raise UserError(f"unknown kernel set {name!r}; valid: {', '.join(ALL_SETS)}")
    return classes[name](dtype, device, head_dim, eps)
