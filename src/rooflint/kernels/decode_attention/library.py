"""decode_attention: the library peer, FlashInfer's batch decode, over the dense cache and a paged one.

FlashInfer's paged cache in its HND layout is [pages, kv_heads, page_size, head_dim]; rooflint's
dense cache [batch, kv_heads, cache, head_dim] is that layout with one page of the whole cache per
sequence, so ``flashinfer`` reads the very tensors the other variants read. ``flashinfer_paged``
copies the cache into 16-token pages placed in a shuffled order (a serving engine's cache after
allocations and frees), when it is built, and times the decode through that page table.
"""

from __future__ import annotations

import torch

from rooflint.kernels.common.libraries import FLASHINFER
from rooflint.kernels.decode_attention import FAMILY

PAGE_SIZE = 16  # vLLM's and SGLang's default page
WORKSPACE_BYTES = 128 * 1024 * 1024  # FlashInfer's documented workspace for split-KV partials


def _decoder(case, pages_per_sequence, page_size, indices, k_cache, v_cache):
    """A zero-argument call of BatchDecodeWithPagedKVCacheWrapper.run, planned once here."""
    b, h, h_kv, c, d = (case.params[key] for key in ("b", "h", "h_kv", "c", "d"))
    device = case["q"].device
    wrapper_class = FLASHINFER.function("", "BatchDecodeWithPagedKVCacheWrapper")
    workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    # Tensor cores for grouped heads: FlashInfer's advice where several query heads share a kv head.
    wrapper = wrapper_class(workspace, kv_layout="HND", use_tensor_cores=h // h_kv >= 4)
    indptr = torch.arange(0, b + 1, dtype=torch.int32, device=device) * pages_per_sequence
    last_page_len = torch.full((b,), c - (pages_per_sequence - 1) * page_size, dtype=torch.int32, device=device)
    wrapper.plan(
        indptr, indices, last_page_len, h, h_kv, d, page_size,
        pos_encoding_mode="NONE", q_data_type=case.dtype, kv_data_type=case.dtype,
    )  # fmt: skip
    q = case["q"].reshape(b, h, d)
    return lambda: wrapper.run(q, (k_cache, v_cache)).view(b, h, 1, d)


@FAMILY.variant("flashinfer", library=FLASHINFER)
def flashinfer(case):
    """FlashInfer BatchDecodeWithPagedKVCacheWrapper over the dense cache (one page per sequence)"""
    b, c = case.params["b"], case.params["c"]
    indices = torch.arange(b, dtype=torch.int32, device=case["q"].device)
    return _decoder(case, 1, c, indices, case["k"], case["v"])


def paged(cache, page_size, order):
    """[b, h_kv, c, d] as pages [b * pages, h_kv, page_size, d], sequence i's page j at order[i * pages + j];
    the last page of each sequence is zero-padded past the cache's end."""
    b, h_kv, c, d = cache.shape
    pages = -(-c // page_size)
    padded = torch.zeros(b, h_kv, pages * page_size, d, dtype=cache.dtype, device=cache.device)
    padded[:, :, :c] = cache
    ordered = padded.view(b, h_kv, pages, page_size, d).permute(0, 2, 1, 3, 4).reshape(b * pages, h_kv, page_size, d)
    out = torch.empty_like(ordered)
    out[order.long()] = ordered
    return out


@FAMILY.variant("flashinfer_paged", library=FLASHINFER)
def flashinfer_paged(case):
    """FlashInfer BatchDecodeWithPagedKVCacheWrapper over 16-token pages in a shuffled order"""
    b, c = case.params["b"], case.params["c"]
    pages = -(-c // PAGE_SIZE)
    generator = torch.Generator(device="cpu").manual_seed(0)
    order = torch.randperm(b * pages, generator=generator).to(device=case["q"].device, dtype=torch.int32)
    k_cache, v_cache = paged(case["k"], PAGE_SIZE, order), paged(case["v"], PAGE_SIZE, order)
    return _decoder(case, pages, PAGE_SIZE, order, k_cache, v_cache)
