"""Kernel sets: which implementation each kind of op of a model runs.

A model's forward calls slots (layer_norm, linear, linear_gelu, prefill_attention, decode_attention,
...) on a kernel set. ``eager`` is PyTorch as Hugging Face runs it; ``compile`` is the same code under
torch.compile (the runner compiles the whole step); ``triton`` and ``cuda`` swap in rooflint's
kernels from rooflint.kernels where the family supports the dtype and shape, and fall back to
eager elsewhere, saying why in ``plan``. Slots no family covers (plain GEMMs, embedding, residual
adds) stay PyTorch in every set, except that the triton set runs a decode step's GEMMs on its own
weight-streaming kernel (kernels/gelu_linear/skinny.py).

``fusions(rows, decoding)`` names what a set fuses at that many rows, and the forward then calls
the fused slots under fused op names (docs/models.md): ``norm_linear`` (a layer norm in the GEMM's
prologue), ``linear_residual`` (the residual add in its epilogue) and ``kv_append`` (a decode
step's new K and V written to the cache by the QKV GEMM). With ROOFLINT_PERSISTENT=1 the triton set
runs a decode step's layers as one persistent kernel, ``decoder_layers`` (models/ops/decode_layers.py:
the same fused ops as phases between grid barriers; slower than a kernel per op so far), and
``phase_shares`` then gives its phases' shares of the kernel's time, which the attribution splits
the kernel by. Eager fuses nothing: it is what Hugging Face runs.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from rooflint.core.errors import UserError, VariantSkipped
from rooflint.core.family import dtype_name
from rooflint.core.triton_compat import interpreting
from rooflint.models.cache import KVCache

KERNEL_SETS = ("eager", "triton", "cuda", "compile")  # run order: compile last, it compiles for minutes
# The library sets (models/library_sets.py: Liger-Kernel, FlashInfer, FlashAttention-4), Llama family
# only, run when asked for; ALL_SETS is every name --kernels takes, in run order.
LIBRARY_SETS = ("liger", "flashinfer", "fa4")
ALL_SETS = ("eager", "triton", "cuda", *LIBRARY_SETS, "compile")
SLOTS = (
    "layer_norm", "prefill_attention", "kv_append", "decode_attention", "linear_gelu", "linear", "lm_head", "sample",
)  # fmt: skip
FUSIONS = ("norm_linear", "linear_residual", "kv_append", "decoder_layers")
LM_HEAD_PAD = 128  # vocab rows padded to whole GEMM tiles (50257 -> 50304), where a set pads


def _heads(qkv: torch.Tensor, batch: int, tokens: int, heads: int) -> torch.Tensor:
    """[B*T, 3*H*D] -> [B, T, 3, H, D] view (GPT-2's fused QKV order: all of q, then k, then v)."""
    return qkv.view(batch, tokens, 3, heads, -1)


def _kv_span(qkv_width: int, cache: KVCache) -> tuple[int, int]:
    """(first K column, K width) of a QKV output [rows, (H + 2 H_kv) D]: q, then K, then V."""
    width = cache.kv_heads * cache.head_dim
    return qkv_width - 2 * width, width


def _kv_columns(qkv: torch.Tensor, cache: KVCache) -> tuple[torch.Tensor, torch.Tensor]:
    """The new K and V rows [rows * kv_heads, head_dim] of a QKV output [rows, (H + 2 H_kv) D],
    ordered (row, kv head) as cache.slots() numbers them."""
    q_width, width = _kv_span(qkv.shape[1], cache)
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


class CompileKernels(EagerKernels):
    """The eager ops; the runner compiles each whole step with torch.compile."""

    name = "compile"
    compiled = True


class _PaddedHead:
    """lm_head against the vocab padded to whole tiles (N = 50257 is a multiple of no GEMM tile;
    50304 is 393 tiles of 128), its logits sliced back to the vocab: a view, no copy."""

    def __init__(self) -> None:
        self._padded: dict[int, torch.Tensor] = {}

    def __call__(self, x, w):
        if w.shape[0] % LM_HEAD_PAD == 0:  # whole tiles already (Llama's 128256): no padded copy
            return F.linear(x, w)
        key = w.data_ptr()
        if key not in self._padded:
            rows = -(-w.shape[0] // LM_HEAD_PAD) * LM_HEAD_PAD
            padded = torch.zeros((rows, w.shape[1]), dtype=w.dtype, device=w.device)
            padded[: w.shape[0]] = w
            self._padded[key] = padded
        return F.linear(x, self._padded[key])[..., : w.shape[0]]


class TritonKernels(EagerKernels):
    """rooflint's Triton kernels: layernorm, attention (prefill), kv_cache append, decode_attention, gelu_linear."""

    name = "triton"

    def __init__(self, dtype, device, head_dim, eps) -> None:
        super().__init__(dtype, device, head_dim, eps)
        from rooflint.core.triton_compat import HAS_TRITON

        if not HAS_TRITON:
            raise VariantSkipped("needs the triton package")
        if device.type != "cuda" and not interpreting():
            raise VariantSkipped("needs a CUDA GPU (or TRITON_INTERPRET=1 for Triton's CPU interpreter)")
        from rooflint.kernels import attention, decode_attention, gelu_linear

        self._workspaces: dict[tuple, object] = {}
        self._folded: dict[int, object] = {}  # weight pointer -> skinny.FoldedNorm
        self._head = _PaddedHead()
        name = dtype_name(dtype)
        power_of_two = head_dim >= 16 and head_dim & (head_dim - 1) == 0
        self.plan["layer_norm"] = "triton"  # the model's eps is passed to the kernel
        self.plan["kv_append"] = "triton"
        for slot, family in (
            ("prefill_attention", attention.FAMILY),
            ("decode_attention", decode_attention.FAMILY),
            ("linear_gelu", gelu_linear.FAMILY),
        ):
            why = _dtype_gap(family, name)
            if why is None and slot != "linear_gelu" and not power_of_two:
                why = f"head_dim {head_dim} is not a power of two >= 16"
            self.plan[slot] = "triton" if why is None else f"eager ({why})"
        why = _dtype_gap(gelu_linear.FAMILY, name)
        self.plan["linear"] = (
            "triton for decode (<= 16 rows, on sm_90 with PDL skinny_pdl.cu's CUDA kernel where K splits over "
            "whole warps), cuBLAS above" if why is None else f"eager ({why})"
        )  # fmt: skip
        self.plan["lm_head"] = f"cuBLAS, vocab padded to a multiple of {LM_HEAD_PAD}"
        self.plan["sample"] = "triton (argmax in one kernel)"
        self._greedy: dict[tuple, object] = {}
        # One persistent kernel for a decode step's layers, only with ROOFLINT_PERSISTENT=1: it is
        # slower than the kernel-per-op step's layers (docs/perf-notes/models.md, Tried and lost).
        # Under the interpreter it runs one program, which does every item.
        self.persistent = os.environ.get("ROOFLINT_PERSISTENT", "") == "1"
        self._layers = None  # (LayerStack, Plan, Workspace), built on the first (uncaptured) step
        self.plan["decoder_layers"] = (
            "triton, one persistent kernel for a decode step's layers (ROOFLINT_PERSISTENT=1)" if self.persistent
            else "off: a kernel per op (ROOFLINT_PERSISTENT=1 runs them as one persistent kernel)"
        )  # fmt: skip
        fused = self.fusions(1, True)
        self.plan["fusions"] = f"<= 16 rows: {', '.join(f for f in FUSIONS if f in fused)}" if fused else "none"

    def _streams(self, rows: int) -> bool:
        """Whether a GEMM over ``rows`` runs on the weight-streaming kernel (a decode step's)."""
        from rooflint.kernels.gelu_linear import skinny

        return rows <= skinny.MAX_ROWS and not self.plan["linear"].startswith("eager")

    def linear(self, x, w, b, residual=None):
        if not self._streams(x.shape[0]):
            return super().linear(x, w, b, residual)
        from rooflint.kernels.gelu_linear import skinny

        return skinny.skinny_linear(x, w, b, residual=residual)

    def fusions(self, rows, decoding):
        plan = self.plan
        if not self._streams(rows):
            return frozenset()
        fused = {"linear_residual"}
        if plan["layer_norm"] == "triton" and plan["linear_gelu"] == "triton":
            fused.add("norm_linear")
            # the cache is then written by the GEMM and read through the block table
            if decoding and plan["decode_attention"] == "triton":
                fused.add("kv_append")
                if self.persistent:
                    fused.add("decoder_layers")
        return frozenset(fused)

    def decode_layers(self, x, layers, cache, position, heads):
        """Every layer of a decode step on x [B, d] in one kernel (the decoder_layers fusion)."""
        from rooflint.models.ops import decode_layers

        x = x.contiguous()
        if self._layers is not None and self._layers[2].qkv.shape[0] == x.shape[0]:
            return self._run_layers(x, cache, position, heads)
        # The first (uncaptured) step, or one with another batch, picks the plan: two programs per
        # SM where the cooperative launch lets them all be resident, else one (the residual stream
        # is only written once the launch is accepted, so a refused launch leaves x as it was). The
        # stacked weights do not depend on the batch: stacked once.
        stack = self._layers[0] if self._layers is not None else decode_layers.LayerStack.of(layers)
        for per_sm in (2, 1):
            launch = decode_layers.default_plan(x.device, stack, per_sm)
            ws = decode_layers.Workspace(x.shape[0], stack, heads, x.device, x.dtype,
                                          max(launch.proj_splits, launch.down_splits))  # fmt: skip
            self._layers = (stack, launch, ws)
            try:
                return self._run_layers(x, cache, position, heads)
            except RuntimeError as error:
                if per_sm == 1 or "cooperative" not in str(error).lower():
                    raise
        raise AssertionError("unreachable")

    def _run_layers(self, x, cache, position, heads):
        from rooflint.models.ops import decode_layers

        stack, launch, ws = self._layers
        return decode_layers.decode_layers(
            x, stack, cache.k_layers, cache.v_layers, cache.block_table, cache.slots(position, 1),
            position + 1, heads, self.eps, ws, launch, stamps=True,
        )  # fmt: skip

    def phase_shares(self):
        if self._layers is None:
            return None
        from rooflint.models.ops import decode_layers

        return decode_layers.phase_shares(self._layers[2].stamps)

    def norm_linear(self, x, ln_w, ln_b, w, b, gelu=False, append=None):
        if "norm_linear" not in self.fusions(x.shape[0], append is not None):
            return super().norm_linear(x, ln_w, ln_b, w, b, gelu, append)
        from rooflint.kernels.gelu_linear import skinny

        key = w.data_ptr()
        if key not in self._folded:  # once per weight, on the first (uncaptured) step
            self._folded[key] = skinny.fold_layer_norm(ln_w, ln_b, w, b)
        into = None
        if append is not None:
            cache, layer, position = append
            k_rows, v_rows = cache.rows(layer)
            start, _ = _kv_span(w.shape[0], cache)
            into = skinny.KVAppend(k_rows, v_rows, cache.slots(position, 1), start, cache.kv_heads,
                                         cache.head_dim)  # fmt: skip
        return skinny.skinny_norm_linear(x, self._folded[key], self.eps, gelu=gelu, append=into)

    def layer_norm(self, x, w, b):
        if self.plan["layer_norm"] != "triton":
            return super().layer_norm(x, w, b)
        from rooflint.kernels.layernorm.triton import triton_layernorm

        return triton_layernorm(x, w, b, torch.empty_like(x), eps=self.eps)

    def linear_gelu(self, x, w, b):
        if self.plan["linear_gelu"] != "triton":
            return super().linear_gelu(x, w, b)
        from rooflint.kernels.gelu_linear.triton import triton_gelu_linear

        return triton_gelu_linear(x, w, b)

    def lm_head(self, x, w):
        return self._head(x, w)

    def sample(self, logits, tokens, token):
        from rooflint.models.ops import sample

        key = tuple(logits.shape)
        if key not in self._greedy:  # allocated on the first (uncaptured) step
            self._greedy[key] = sample.GreedyWorkspace(logits.shape[0], logits.shape[1], logits.device)
        sample.greedy_argmax(logits, tokens, token, self._greedy[key])

    def kv_append(self, cache, layer, k_rows, v_rows, slots):
        from rooflint.kernels.kv_cache.triton import triton_kv_copy

        k_pool, v_pool = cache.rows(layer)
        triton_kv_copy(k_rows, v_rows, k_pool, v_pool, slots, k_rows.shape[0], k_rows.shape[1], True)

    def attend_prefill(self, q, k, v):
        if self.plan["prefill_attention"] != "triton":
            return super().attend_prefill(q, k, v)
        from rooflint.kernels.attention.triton import triton_attention

        b, h, t, d = q.shape
        out = torch.empty((b, t, h, d), dtype=q.dtype, device=q.device)  # token-major: rows are a view
        return triton_attention(q, k, v, True, out.transpose(1, 2))  # q, k, v read as strided views

    def attend_decode(self, q, cache, layer, length):
        if self.plan["decode_attention"] != "triton":
            return super().attend_decode(q, cache, layer, length)
        from rooflint.kernels.decode_attention.triton import triton_paged_decode

        k_pool, v_pool = cache.pools(layer)
        ws = self._workspace(q, cache.kv_heads, length)
        return triton_paged_decode(q, k_pool, v_pool, cache.block_table, cache.kv_heads, length, ws)

    def _workspace(self, q, kv_heads: int, length: int):
        from rooflint.kernels.decode_attention.plans import DecodeWorkspace

        key = (tuple(q.shape), kv_heads, length)
        if key not in self._workspaces:  # allocated on the first (uncaptured) call of each length
            self._workspaces[key] = DecodeWorkspace(q, kv_heads, length, plan=self._decode_plan(q, kv_heads, length))
        return self._workspaces[key]

    def _decode_plan(self, q, kv_heads: int, length: int) -> tuple[int, int] | None:
        """The decode kernel's (splits, chunk) for this shape; None: DecodeWorkspace's default plan."""
        return None


class CudaKernels(TritonKernels):
    """rooflint's CUDA C++ kernels (built with nvcc on first use) in the same slots."""

    name = "cuda"

    def __init__(self, dtype, device, head_dim, eps) -> None:
        EagerKernels.__init__(self, dtype, device, head_dim, eps)
        if device.type != "cuda":
            raise VariantSkipped("needs a CUDA GPU")
        from rooflint.engine import cuda_build
        from rooflint.kernels import attention, decode_attention, gelu_linear, kv_cache, layernorm

        self._workspaces = {}
        self._head = _PaddedHead()
        self._libraries = {}
        name = dtype_name(dtype)
        for slot, module in (
            ("layer_norm", layernorm),
            ("prefill_attention", attention),
            ("kv_append", kv_cache),
            ("decode_attention", decode_attention),
            ("linear_gelu", gelu_linear),
        ):
            why = _dtype_gap(module.FAMILY, name, interpreter_fp32=False)
            if why is None and slot in ("prefill_attention", "decode_attention") and head_dim not in (64, 128):
                why = f"the CUDA kernel is built for head_dim 64 or 128, not {head_dim}"
            if why is None:
                try:
                    self._libraries[slot] = cuda_build.load(cuda_build.family_source(module.__file__))
                except VariantSkipped as error:
                    why = str(error)
            self.plan[slot] = "cuda" if why is None else f"eager ({why})"
        self.plan["lm_head"] = f"cuBLAS, vocab padded to a multiple of {LM_HEAD_PAD}"

    def fusions(self, rows, decoding):
        return frozenset()  # its GEMMs are cuBLAS's: no prologue or epilogue to fuse into

    def phase_shares(self):
        return None  # no persistent kernel (TritonKernels' state for it is never built here)

    def sample(self, logits, tokens, token):
        EagerKernels.sample(self, logits, tokens, token)  # no CUDA C++ argmax: torch's

    def layer_norm(self, x, w, b):
        if self.plan["layer_norm"] != "cuda":
            return EagerKernels.layer_norm(self, x, w, b)
        from rooflint.kernels.layernorm.cuda import cuda_layernorm

        return cuda_layernorm(self._libraries["layer_norm"], x, w, b, torch.empty_like(x), eps=self.eps)

    def linear_gelu(self, x, w, b):
        if self.plan["linear_gelu"] != "cuda":
            return EagerKernels.linear_gelu(self, x, w, b)
        from rooflint.kernels.gelu_linear.cuda import cuda_gelu_linear

        out = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
        return cuda_gelu_linear(self._libraries["linear_gelu"], x.contiguous(), w, b, out)

    def kv_append(self, cache, layer, k_rows, v_rows, slots):
        if self.plan["kv_append"] != "cuda":
            return EagerKernels.kv_append(self, cache, layer, k_rows, v_rows, slots)
        from rooflint.kernels.kv_cache.cuda import cuda_kv_copy

        k_pool, v_pool = cache.rows(layer)
        rows, row_elems = k_rows.shape
        cuda_kv_copy(self._libraries["kv_append"], k_rows, v_rows, k_pool, v_pool, slots, rows, row_elems, True)

    def attend_prefill(self, q, k, v):
        if self.plan["prefill_attention"] != "cuda":
            return EagerKernels.attend_prefill(self, q, k, v)
        from rooflint.kernels.attention.cuda import cuda_attention

        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # the kernel takes no strides: two copies
        return cuda_attention(self._libraries["prefill_attention"], q, k, v, True, torch.empty_like(q))

    def _decode_plan(self, q, kv_heads: int, length: int) -> tuple[int, int]:
        # The plan the bench's `cuda` decode variant runs: waves of the blocks this GPU holds per SM.
        from rooflint.kernels.decode_attention.cuda import cuda_plan

        return cuda_plan(self._libraries["decode_attention"], q, kv_heads, length)

    def attend_decode(self, q, cache, layer, length):
        if self.plan["decode_attention"] != "cuda":
            return EagerKernels.attend_decode(self, q, cache, layer, length)
        from rooflint.kernels.decode_attention.cuda import cuda_decode

        k, v = cache.view(layer, length)  # read in place: the kernel strides rows by the capacity
        return cuda_decode(self._libraries["decode_attention"], q, k, v, self._workspace(q, cache.kv_heads, length))


def _dtype_gap(family, dtype: str, interpreter_fp32: bool = True) -> str | None:
    """Why a family's kernel is not used for ``dtype``, or None.

    Families leave fp32 out where the GPU would run its dots in TF32; Triton's CPU interpreter
    multiplies fp32 exactly, so there fp32 is allowed and the CPU tests can check the swaps in fp32.
    """
    if dtype in family.dtypes or (interpreter_fp32 and dtype == "fp32" and interpreting()):
        return None
    return f"the {family.name} family has no {dtype}"


def make_kernel_set(name: str, dtype: torch.dtype, device: torch.device, head_dim: int, eps: float) -> EagerKernels:
    """The kernel set ``name``; raises VariantSkipped where it cannot run here."""
    classes = {"eager": EagerKernels, "compile": CompileKernels, "triton": TritonKernels, "cuda": CudaKernels}
    if name in LIBRARY_SETS:
        raise VariantSkipped(f"the {name} set runs the Llama family's ops (RMSNorm, RoPE, SwiGLU, GQA attention) only")
    if name not in classes:
        raise UserError(f"unknown kernel set {name!r}; valid: {', '.join(ALL_SETS)}")
    return classes[name](dtype, device, head_dim, eps)
