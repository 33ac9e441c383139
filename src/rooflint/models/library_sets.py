"""Library kernel sets for the Llama family: the peers a user deploys in the
model's slots, each set replacing the ops its library covers and keeping PyTorch (HF's eager ops,
cuBLAS GEMMs) for the rest, so a set's difference from ``eager`` is the library's own.

- ``liger`` (Liger-Kernel's Triton kernels): RMSNorm with the residual add (LigerRMSNormFunction,
  LigerFusedAddRMSNormFunction), RoPE from HF's cos/sin tables (LigerRopeFunction) and SwiGLU
  (LigerSiLUMulFunction), through liger_kernel.transformers.functional. Liger's SwiGLU reads its
  two inputs with one row stride, so gate and up are two GEMMs, as LigerSwiGLUMLP runs them.
- ``flashinfer``: RMSNorm (norm.rmsnorm, and fused_add_rmsnorm in place), RoPE from the same
  tables as a cos/sin cache (apply_rope_with_cos_sin_cache_inplace, so every rope_type is HF's),
  and decode attention (BatchDecodeWithPagedKVCacheWrapper) over rooflint's cache read in place.
- ``fa4`` (FlashAttention-4, CuTe DSL): prefill attention (flash_attn_func, causal, GQA by K and V
  with fewer heads) and decode attention (flash_attn_varlen_func with seqused_k over the cache; one
  KV split where FlashAttention-4 builds no split-KV kernel, SM 8.x, 9.x and 12.x).

rooflint's cache (models/cache.py) stores each (sequence, kv head)'s positions consecutively, so a
layer's pool is [B, H_kv, capacity, D]: FlashInfer's HND paged layout with one page of the whole
capacity per sequence, and, transposed, FlashAttention's [B, capacity, H_kv, D] with strides. The
number of cached positions then lives in a device tensor filled inside each decode step: the step's
CUDA graph carries its own length, and one planned wrapper serves every step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import dtype_name
from rooflint.kernels.common.libraries import FLASH_ATTN_4, FLASHINFER, LIGER, Library
from rooflint.models.kernel_sets import EagerKernels
from rooflint.models.llama_kernels import LlamaSlots, split_heads

FLASHINFER_WORKSPACE_BYTES = 128 * 1024 * 1024  # FlashInfer's documented float workspace


class LibrarySet(LlamaSlots, EagerKernels):
    """A library's kernels in the slots it covers (``covers``), PyTorch in the others."""

    library: Library
    covers: dict[str, str] = {}  # plan slot -> what the library runs there
    keeps: dict[str, str] = {}  # plan slot the library could cover -> why it stays PyTorch
    dtypes: tuple[str, ...] = ("fp16", "bf16", "fp32")

    def __init__(self, dtype, device, head_dim, eps) -> None:
        super().__init__(dtype, device, head_dim, eps)
        self._llama_plan()
        why = self.library.missing(device.type)
        if why is not None:
            raise VariantSkipped(why)
        if dtype_name(dtype) not in self.dtypes:
            takes = ", ".join(self.dtypes)
            raise VariantSkipped(f"{self.library.name}'s kernels take {takes}, not {dtype_name(dtype)}")
        self.bind()
        version = self.library.version() or "(unknown version)"
        for slot, how in self.covers.items():
            self.plan[slot] = f"{self.library.name} {version}: {how}"
        for slot, why in self.keeps.items():
            self.plan[slot] = f"eager ({why})"
        self.plan["linear"] = self.plan["lm_head"] = "cuBLAS (F.linear)"

    def bind(self) -> None:
        """Look the library's functions up once (a release without one is a skip naming its version)."""


class LigerKernels(LibrarySet):
    name = "liger"
    library = LIGER
    covers = {
        "rms_norm": "liger_rms_norm, liger_fused_add_rms_norm with the residual (Triton)",
        "rope": "liger_rope from HF's cos/sin tables (Triton, q and k copied out of the QKV output)",
        "swiglu": "liger_swiglu (LigerSiLUMulFunction) on separate gate and up GEMMs, as LigerSwiGLUMLP",
    }
    keeps = {"prefill_attention": "Liger has no attention: SDPA", "decode_attention": "Liger has no attention: SDPA",
             "kv_append": "index_copy_"}  # fmt: skip

    def bind(self) -> None:
        function = self.library.function
        self._norm = function("transformers.functional", "liger_rms_norm")
        self._add_norm = function("transformers.functional", "liger_fused_add_rms_norm")
        self._rope = function("transformers.functional", "liger_rope")
        self._swiglu = function("transformers.functional", "liger_swiglu")

    def rms_norm(self, x, w, residual=None):
        if residual is None:
            return self._norm(x, w, self.eps), x
        return self._add_norm(x, residual, w, self.eps)  # (norm(x + residual), x + residual)

    def rope(self, q, k, cos, sin):
        # Liger takes [B, heads, T, D] and the [T, D] tables; it returns the rotated [B, heads, T, D]
        q, k = self._rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        return q.transpose(1, 2), k.transpose(1, 2)

    def gate_up(self, h, w, b, ffn):
        """gate and up as two contiguous [rows, ffn] outputs: Liger's SwiGLU kernel strides both of its
        inputs by its output's row, so the column halves of one GEMM's output would be misread."""
        gate_b, up_b = (None, None) if b is None else (b[:ffn], b[ffn:])
        return F.linear(h, w[:ffn], gate_b), F.linear(h, w[ffn:], up_b)

    def silu_mul(self, gate, up):
        return self._swiglu(gate, up)


class FlashInferKernels(LibrarySet):
    name = "flashinfer"
    library = FLASHINFER
    dtypes = ("fp16", "bf16")  # its norm, RoPE and decode kernels dispatch on 16-bit types only
    covers = {
        "rms_norm": "norm.rmsnorm, norm.fused_add_rmsnorm with the residual (in place)",
        "rope": "apply_rope_with_cos_sin_cache_inplace on the QKV output, HF's tables as its cos/sin cache",
        "decode_attention": "BatchDecodeWithPagedKVCacheWrapper (fa2, CUDA cores) over the cache in place, "
        "HND with one page per sequence",
    }
    keeps = {"prefill_attention": "SDPA: FlashInfer's prefill wrappers are not wired in", "swiglu": "FlashInfer "
             "has no SwiGLU", "kv_append": "index_copy_: FlashInfer's append_paged_kv_cache takes pages of every "
             "kv head, rooflint's hold one"}  # fmt: skip

    def bind(self) -> None:
        function = self.library.function
        self._norm = function("norm", "rmsnorm")
        self._add_norm = function("norm", "fused_add_rmsnorm")
        self._rope = function("rope", "apply_rope_with_cos_sin_cache_inplace")
        self._wrapper_class = function("decode", "BatchDecodeWithPagedKVCacheWrapper")
        self._positions: dict[tuple[int, int, int], torch.Tensor] = {}
        self._cos_sin: dict[int, torch.Tensor] = {}
        self._decoders: dict[tuple, tuple] = {}

    def rms_norm(self, x, w, residual=None):
        if residual is None:
            return self._norm(x, w, eps=self.eps), x
        self._add_norm(x, residual, w, eps=self.eps)  # residual += x; x = norm(residual)
        return x, residual

    def rope_append(self, qkv, batch, tokens, weights, start, cache, layer):
        heads, kv_heads, d = weights.heads, weights.kv_heads, weights.head_dim
        q_width, kv_width = heads * d, kv_heads * d
        cos, sin = weights.rope_tables_for(start, tokens)
        key = cos.data_ptr()
        if key not in self._cos_sin:  # fp32 [positions, D]: cos of the D/2 frequencies, then their sin
            self._cos_sin[key] = torch.cat((cos[:, : d // 2], sin[:, : d // 2]), dim=-1).float().contiguous()
        positions = self._positions_of(batch, start, tokens, qkv.device)
        self._rope(positions, qkv[:, :q_width], qkv[:, q_width : q_width + kv_width], d, self._cos_sin[key], True)
        q, k, v = split_heads(qkv, batch, tokens, weights)
        if cache is not None:
            self.kv_append(cache, layer, k.reshape(-1, d), v.reshape(-1, d), cache.slots(start, tokens))
        return q, k, v

    def _positions_of(self, batch, start, tokens, device) -> torch.Tensor:
        """Each QKV row's position (rows are (sequence, token)), kept: a captured graph reads it."""
        key = (batch, start, tokens)
        if key not in self._positions:
            self._positions[key] = torch.arange(start, start + tokens, device=device).repeat(batch)
        return self._positions[key]

    def attend_decode_gqa(self, q, cache, layer, length):
        wrapper, lengths = self._decoder(q, cache)
        lengths.fill_(length)  # read by the kernel when it runs: a graph replays its own step's length
        k, v = cache.view(layer, cache.capacity)  # [B, H_kv, capacity, D]: HND, one page per sequence
        batch, heads, _, d = q.shape
        return wrapper.run(q.reshape(batch, heads, d).contiguous(), (k, v)).view(batch, heads, 1, d)

    def _decoder(self, q, cache):
        """One wrapper per shape, planned once (outside any graph): with one page per sequence its plan
        does not depend on the length, which it reads from ``lengths`` at run time."""
        batch, heads, _, d = q.shape
        key = (batch, heads, cache.kv_heads, d, cache.capacity)
        if key not in self._decoders:
            device = q.device
            pages = torch.arange(batch + 1, dtype=torch.int32, device=device)
            lengths = torch.full((batch,), cache.capacity, dtype=torch.int32, device=device)
            workspace = torch.zeros(FLASHINFER_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
            wrapper = self._wrapper_class(
                workspace, kv_layout="HND", use_cuda_graph=True, use_tensor_cores=False,
                paged_kv_indptr_buffer=pages.clone(), paged_kv_indices_buffer=pages[:-1].clone(),
                paged_kv_last_page_len_buffer=lengths, backend="fa2",
            )  # fmt: skip
            wrapper.plan(pages, pages[:-1], lengths.clone(), heads, cache.kv_heads, d, cache.capacity,
                         pos_encoding_mode="NONE", q_data_type=q.dtype, kv_data_type=q.dtype)  # fmt: skip
            self._decoders[key] = (wrapper, lengths)
        return self._decoders[key]


class FlashAttention4Kernels(LibrarySet):
    name = "fa4"
    library = FLASH_ATTN_4
    dtypes = ("fp16", "bf16")  # FlashAttention-4's tensor-core kernels take 16-bit inputs only
    covers = {
        "prefill_attention": "flash_attn_func(causal=True), GQA from K and V with H_kv heads, read in place",
        "decode_attention": "flash_attn_varlen_func with seqused_k over the cache in place "
        "([B, capacity, H_kv, D] strided)",
    }
    keeps = {"rms_norm": "FlashAttention has no norm", "rope": "FlashAttention-4 has no RoPE kernel",
             "swiglu": "FlashAttention has no SwiGLU", "kv_append": "index_copy_"}  # fmt: skip

    def bind(self) -> None:
        self._prefill = self.library.function("", "flash_attn_func")
        self._varlen = self.library.function("", "flash_attn_varlen_func")
        self._lengths: dict[int, torch.Tensor] = {}
        self._num_splits = fa4_num_splits(self.device)
        how = "split-KV heuristic (num_splits=0)" if self._num_splits == 0 else "one split (num_splits=1)"
        self.covers = {**self.covers, "decode_attention": f"{self.covers['decode_attention']}, {how}"}

    def attend_prefill_gqa(self, q, k, v):
        out = self._prefill(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
        return _first(out).transpose(1, 2)  # [B, T, H, D] back to [B, H, T, D], a view

    def attend_decode_gqa(self, q, cache, layer, length):
        batch = q.shape[0]
        if batch not in self._lengths:  # kept: a captured graph reads it
            self._lengths[batch] = torch.zeros(batch, dtype=torch.int32, device=q.device)
        lengths = self._lengths[batch]
        lengths.fill_(length)
        k, v = cache.view(layer, cache.capacity)
        out = self._varlen(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), seqused_k=lengths,
                           num_splits=self._num_splits)  # fmt: skip
        return _first(out).transpose(1, 2)


# FlashAttention-4 builds split-KV kernels (float32 partial outputs, then a combine) for SM 10.x and
# 11.x only: its SM 8.x, 9.x and 12.x forwards assert ``not is_split_kv`` (flash_attn/cute/interface.py,
# _flash_attn_fwd, 4.0.0b36), and num_splits=0 lets its heuristic pick splits > 1 for a decode step
# (few query blocks, many key blocks). num_splits=1 is the one-pass kernel, exact for every length.
SPLIT_KV_ARCH_MAJORS = (10, 11)


def fa4_num_splits(device: torch.device) -> int:
    """0 (FlashAttention-4's split heuristic) where it has split-KV kernels, else 1."""
    if device.type != "cuda":
        return 1
    major, _ = torch.cuda.get_device_capability(device)
    return 0 if major in SPLIT_KV_ARCH_MAJORS else 1


def _first(result):
    """FlashAttention-4 returns (out, lse); a release that returns out alone works too."""
    return result[0] if isinstance(result, tuple) else result


LIBRARY_SET_CLASSES = {"liger": LigerKernels, "flashinfer": FlashInferKernels, "fa4": FlashAttention4Kernels}


def make_library_set(name: str, dtype: torch.dtype, device: torch.device, head_dim: int, eps: float) -> LibrarySet:
    """The library set ``name``; raises VariantSkipped (the reason and the install line) where its
    library cannot run here."""
    return LIBRARY_SET_CLASSES[name](dtype, device, head_dim, eps)
