"""The triton set: rooflint's Triton kernels in the slots whose family covers the dtype and shape.

prefill_attention, decode_attention and linear_gelu run their families' Triton kernels where the
family has the dtype (and, for attention, the head_dim fits), else eager with the reason in ``plan``;
layer_norm and kv_append always run Triton's, sample is a one-kernel argmax and lm_head is cuBLAS
against the vocab padded to whole tiles. A GEMM of <= 16 rows runs on the weight-streaming kernel
(kernels/gelu_linear/skinny.py), which is what lets this set fuse there: ``linear_residual``,
``norm_linear`` and a decode step's ``kv_append``, and with ROOFLINT_PERSISTENT=1 ``decoder_layers``
(one persistent kernel for a decode step's layers, models/ops/decode_layers.py).
"""

from __future__ import annotations

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import dtype_name
from rooflint.core.switches import switch
from rooflint.core.triton_compat import interpreting
from rooflint.models.kernel_sets.common import FUSIONS, LM_HEAD_PAD, PaddedHead, dtype_gap, kv_span
from rooflint.models.kernel_sets.eager import EagerKernels


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
        self._folds: dict[tuple, object] = {}  # (norm, weight pointers) -> a weight with its norm folded in
        self._head = PaddedHead()
        name = dtype_name(dtype)
        power_of_two = head_dim >= 16 and head_dim & (head_dim - 1) == 0
        self.plan["layer_norm"] = "triton"  # the model's eps is passed to the kernel
        self.plan["kv_append"] = "triton"
        for slot, family in (
            ("prefill_attention", attention.FAMILY),
            ("decode_attention", decode_attention.FAMILY),
            ("linear_gelu", gelu_linear.FAMILY),
        ):
            why = dtype_gap(family, name)
            if why is None and slot != "linear_gelu" and not power_of_two:
                why = f"head_dim {head_dim} is not a power of two >= 16"
            self.plan[slot] = "triton" if why is None else f"eager ({why})"
        why = dtype_gap(gelu_linear.FAMILY, name)
        self.plan["linear"] = (
            "triton for decode (<= 16 rows, on sm_90 with PDL skinny_pdl.cu's CUDA kernel where K splits over "
            "whole warps, skinny_ring.cu's where each SM streams over 448 KB of W at <= 8 rows), cuBLAS above"
            if why is None else f"eager ({why})"
        )  # fmt: skip
        self.plan["lm_head"] = f"cuBLAS, vocab padded to a multiple of {LM_HEAD_PAD}"
        self.plan["sample"] = "triton (argmax in one kernel)"
        self._greedy: dict[tuple, object] = {}
        # One persistent kernel for a decode step's layers, only with ROOFLINT_PERSISTENT=1: it is
        # slower than the kernel-per-op step's layers (docs/perf-notes/models.md, Tried and lost).
        # Under the interpreter it runs one program, which does every item.
        self.persistent = switch("ROOFLINT_PERSISTENT") is True
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

        folded = self.folded_once(("layer_norm", w.data_ptr()), lambda: skinny.fold_layer_norm(ln_w, ln_b, w, b))
        into = None
        if append is not None:
            cache, layer, position = append
            k_rows, v_rows = cache.rows(layer)
            start, _ = kv_span(w.shape[0], cache)
            into = skinny.KVAppend(k_rows, v_rows, cache.slots(position, 1), start, cache.kv_heads,
                                         cache.head_dim)  # fmt: skip
        return skinny.skinny_norm_linear(x, folded, self.eps, gelu=gelu, append=into)

    def folded_once(self, key: tuple, fold):
        """fold() the first time ``key`` is asked, else what it made then: a weight with a norm folded in is
        made once, on the first (uncaptured) step, and read in place by every graph replay after."""
        if key not in self._folds:
            self._folds[key] = fold()
        return self._folds[key]

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
        """The decode kernel's (splits, chunk) for this shape; None: DecodeWorkspace's default plan.
        Under PDL a program loads its chunk before its wait where the chunk fits its registers, so
        the chunks are made to fit (preload_plan); without PDL nothing loads early."""
        from rooflint.kernels import sm_count
        from rooflint.kernels.common.pdl import pdl_enabled
        from rooflint.kernels.decode_attention.triton import preload_plan

        if not pdl_enabled(q.device):
            return None
        return preload_plan(q.shape[0], kv_heads, length, q.shape[3], sm_count(q.device, on_cpu=132))
