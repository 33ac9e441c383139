"""The cuda set: rooflint's CUDA C++ kernels (built with nvcc on first use) in the triton set's slots.

It keeps the triton set's plumbing (the decode workspaces, the padded lm_head) and swaps each
covered slot's kernel for the family's CUDA one; GEMMs are cuBLAS's, so it fuses nothing.
"""

from __future__ import annotations

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import dtype_name
from rooflint.models.kernel_sets.common import LM_HEAD_PAD, PaddedHead, dtype_gap
from rooflint.models.kernel_sets.eager import EagerKernels
from rooflint.models.kernel_sets.triton import TritonKernels


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
        self._head = PaddedHead()
        self._libraries = {}
        name = dtype_name(dtype)
        for slot, module in (
            ("layer_norm", layernorm),
            ("prefill_attention", attention),
            ("kv_append", kv_cache),
            ("decode_attention", decode_attention),
            ("linear_gelu", gelu_linear),
        ):
            why = dtype_gap(module.FAMILY, name, interpreter_fp32=False)
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
