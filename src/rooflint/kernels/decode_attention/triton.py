"""decode_attention: triton implementation."""

from __future__ import annotations

import math

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import gdc_wait, interpreting, tl, triton
from rooflint.kernels.common.pdl import launch_next, pdl_enabled, pdl_launch, prefetch_l2, wait
from rooflint.kernels.decode_attention import FAMILY, LOG2E
from rooflint.kernels.decode_attention.plans import (
    MIN_SPLIT_TOKENS,
    DecodeWorkspace,
    cache_layout,
    q_layout,
    split_plan,
)
from rooflint.kernels.kv_cache import BLOCK_SIZE


@triton.jit
def _decode_split_kernel(
    q_ptr, k_ptr, v_ptr, part_acc_ptr, part_ml_ptr, table_ptr,
    C, chunk, splits, qk_scale, q_batch_stride, kv_rows, table_stride,
    H_KV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
    PAGED: tl.constexpr, PAGE: tl.constexpr, UPCAST: tl.constexpr, PDL: tl.constexpr,
    PREFETCH_PAGES: tl.constexpr, ELEM_BYTES: tl.constexpr, PRELOAD: tl.constexpr,
):  # fmt: skip
    # One program: kv head (b, hk) x one chunk of the cache, for all G query heads of the group,
    # so each K/V tile is loaded once and used G times.
    bh = tl.program_id(0)
    split = tl.program_id(1)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, D)
    g_mask = g < G
    # q may be a view of a model's fused QKV output: sequences q_batch_stride apart, heads D apart.
    q_offs = (bh // H_KV) * q_batch_stride + ((bh % H_KV) * G + g) * D
    q_rows = bh * G + g  # (b, hk*G + g) flattened: the row of the partials and of o [B*H, D]
    # Dense: (b, hk) owns kv_rows consecutive rows (C, or a longer buffer's capacity), read in
    # place. Paged: its logical page p is physical page table[bh, p] of PAGE rows. int64: the
    # large size's cache is 2^30 elements.
    kv_base = bh.to(tl.int64) * kv_rows * D
    start = split * chunk
    end = tl.minimum(start + chunk, C)
    if PRELOAD > 0:
        # The chunk is PRELOAD tiles: their K and V go into registers before the wait, all but the
        # newest row, which the QKV kernel before this one writes (_attend_preloaded).
        if PDL:
            launch_next()
        page_row = table_ptr + bh * table_stride if PAGED else table_ptr
        keys, values, offsets = _load_old_rows(k_ptr, v_ptr, page_row, kv_base, start, end, C - 1,
                                               D, BLOCK_N, PAGED, PAGE, PRELOAD)  # fmt: skip
        if PDL:
            gdc_wait()
        q = tl.load(q_ptr + q_offs[:, None] + d[None, :], mask=g_mask[:, None], other=0.0)
        m_i, l_i, acc = _attend_preloaded(q, k_ptr, v_ptr, keys, values, offsets, start, end, C - 1, qk_scale,
                                          BLOCK_G, D, BLOCK_N, UPCAST, PRELOAD)  # fmt: skip
    else:
        m_i, l_i, acc = _streamed_chunk(
            q_ptr, k_ptr, v_ptr, table_ptr, q_offs, bh, start, end, kv_base, table_stride, qk_scale, d, g_mask,
            BLOCK_G, D, BLOCK_N, PAGED, PAGE, UPCAST, PDL, PREFETCH_PAGES, ELEM_BYTES,
        )  # fmt: skip
    _store_partial(acc, m_i, l_i, part_acc_ptr, part_ml_ptr, q_rows, split, splits, d, g_mask, D)


@triton.jit
def _streamed_chunk(
    q_ptr, k_ptr, v_ptr, table_ptr, q_offs, bh, start, end, kv_base, table_stride, qk_scale, d, g_mask,
    BLOCK_G: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr, PAGED: tl.constexpr, PAGE: tl.constexpr,
    UPCAST: tl.constexpr, PDL: tl.constexpr, PREFETCH_PAGES: tl.constexpr, ELEM_BYTES: tl.constexpr,
):  # fmt: skip
    """The chunk's (m, l, acc) through the pipelined loop (attend_chunk): a chunk too long for
    registers, or off PDL."""
    page_row = table_ptr  # dense: unused
    page_next = start
    if PAGED:
        # The first tile's physical pages. The block table does not change during a step, so this
        # load may run ahead of the PDL wait; the loop below keeps the table a tile ahead of K/V.
        page_row = table_ptr + bh * table_stride
        first = start + tl.arange(0, BLOCK_N)
        page_next = tl.load(page_row + first // PAGE, mask=first < end, other=0)
    if PDL:
        # Programmatic dependent launch (kernels/common/pdl.py): this program's K and V rows start
        # streaming into L2 while the QKV projection before it still runs; only the newest row is
        # that kernel's, and L2 serves it fresh after the wait. Paged: the first PREFETCH_PAGES
        # pages of the chunk (the block table is constant), 2 KB each at D=64; dense: one range.
        if PAGED:
            ahead = tl.minimum(start // PAGE + tl.arange(0, PREFETCH_PAGES), (end - 1) // PAGE)
            ahead_pages = tl.load(page_row + ahead).to(tl.int64)
            nbytes = tl.full([PREFETCH_PAGES], PAGE * D * ELEM_BYTES, tl.int32)
            prefetch_l2(k_ptr + ahead_pages * PAGE * D, nbytes)
            prefetch_l2(v_ptr + ahead_pages * PAGE * D, nbytes)
        else:
            first = kv_base + start * D + tl.arange(0, 1)
            nbytes = tl.full([1], 0, tl.int32) + (end - start) * D * ELEM_BYTES
            prefetch_l2(k_ptr + first, nbytes)
            prefetch_l2(v_ptr + first, nbytes)
        wait()
    q = tl.load(q_ptr + q_offs[:, None] + d[None, :], mask=g_mask[:, None], other=0.0)  # the QKV GEMM's output
    return attend_chunk(q, k_ptr, v_ptr, page_row, page_next, kv_base, start, end, qk_scale,
                         BLOCK_G, D, BLOCK_N, PAGED, PAGE, UPCAST, "")  # fmt: skip


@triton.jit
def _store_partial(acc, m_i, l_i, part_acc_ptr, part_ml_ptr, q_rows, split, splits, d, g_mask, D: tl.constexpr):
    # Partials are fp32 [B*H, splits, D] plus (m, l): a few KB against the MBs of cache streamed.
    part = q_rows * splits + split
    tl.store(part_acc_ptr + part[:, None] * D + d[None, :], acc, mask=g_mask[:, None])
    tl.store(part_ml_ptr + part * 2, m_i, mask=g_mask)
    tl.store(part_ml_ptr + part * 2 + 1, l_i, mask=g_mask)


@triton.jit
def _load_old_rows(
    k_ptr, v_ptr, page_row, kv_base, start, end, newest,
    D: tl.constexpr, BLOCK_N: tl.constexpr, PAGED: tl.constexpr, PAGE: tl.constexpr, TILES: tl.constexpr,
):  # fmt: skip
    """(K tiles, V tiles, their element offsets) of keys [start, end) as TILES register tiles,
    without row ``newest``: earlier steps wrote every other row, so they may load before the wait."""
    d = tl.arange(0, D)
    keys = ()
    values = ()
    offsets = ()
    for tile in tl.static_range(TILES):
        n = start + tile * BLOCK_N + tl.arange(0, BLOCK_N)
        if PAGED:
            page = tl.load(page_row + n // PAGE, mask=n < end, other=0).to(tl.int64)
            offs = (page * PAGE + n % PAGE)[:, None] * D + d[None, :]
        else:
            offs = kv_base + n[:, None] * D + d[None, :]
        old = (n < end) & (n != newest)
        keys = keys + (tl.load(k_ptr + offs, mask=old[:, None], other=0.0),)
        values = values + (tl.load(v_ptr + offs, mask=old[:, None], other=0.0),)
        offsets = offsets + (offs,)
    return keys, values, offsets


@triton.jit
def _attend_preloaded(
    q, k_ptr, v_ptr, keys, values, offsets, start, end, newest, qk_scale,
    BLOCK_G: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr, UPCAST: tl.constexpr, TILES: tl.constexpr,
):  # fmt: skip
    """attend_chunk over tiles already in registers: the newest row is read now (after the wait,
    from L2: ".cg", an SM's L1 may not hold another SM's fresh write) into the tile that has it."""
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, D], tl.float32)
    for tile in tl.static_range(TILES):
        n = start + tile * BLOCK_N + tl.arange(0, BLOCK_N)
        fresh = (n == newest)[:, None]
        k = tl.where(fresh, tl.load(k_ptr + offsets[tile], mask=fresh, other=0.0, cache_modifier=".cg"), keys[tile])
        v = tl.where(fresh, tl.load(v_ptr + offsets[tile], mask=fresh, other=0.0, cache_modifier=".cg"), values[tile])
        m_i, l_i, acc = _softmax_tile(q, k, v, n < end, m_i, l_i, acc, qk_scale, UPCAST)
    return m_i, l_i, acc


@triton.jit
def _softmax_tile(q, k, v, n_mask, m_i, l_i, acc, qk_scale, UPCAST: tl.constexpr):
    """One key tile of the online softmax: (m, l, acc) updated by keys k and values v [BLOCK_N, D]."""
    # The G (padded to 16) query rows make QK^T a small tensor-core matmul; the scale folds in
    # log2(e) so the softmax uses exp2, one MUFU instruction.
    if UPCAST:
        s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)))
    else:
        s = tl.dot(q, tl.trans(k))
    s = tl.where(n_mask[None, :], s * qk_scale, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if UPCAST:
        pv = tl.dot(p, v.to(tl.float32))
    else:
        pv = tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc * alpha[:, None] + pv


@triton.jit
def attend_chunk(
    q, k_ptr, v_ptr, page_row, page_next, kv_base, start, end, qk_scale,
    BLOCK_G: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr, PAGED: tl.constexpr, PAGE: tl.constexpr,
    UPCAST: tl.constexpr, KV_CACHE: tl.constexpr,
):  # fmt: skip
    """Online softmax of q [BLOCK_G, D] over keys [start, end) of one (sequence, kv head): the
    unnormalised (m, l, acc) partial. Paged: ``page_next`` holds the first tile's physical pages
    (loaded by the caller, ahead of any wait); dense: rows kv_base + n * D. ``KV_CACHE`` is the
    K/V load cache modifier: ".cg" where another SM appended the newest row in this kernel."""
    d = tl.arange(0, D)
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, D], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        n_mask = n < end
        if PAGED:
            # This tile's pages were loaded an iteration ago; the next tile's are loaded now. Read
            # here and used at once, the table made Triton's pipeliner spend its stages on the
            # table -> K/V chain: K and V got one buffer, issued after this tile's math and awaited
            # at the next (39 KB of shared memory at D=128 against the dense kernel's 72; GQA at
            # 0.73 of the H200's ceiling). With the addresses ready an iteration early, K and V get
            # the dense kernel's double buffer, the next tile streaming while this one is reduced.
            # A thread's entries for its rows of the tile (a few distinct pages) are L1 hits.
            page = page_next.to(tl.int64)
            page_next = tl.load(page_row + (n + BLOCK_N) // PAGE, mask=n + BLOCK_N < end, other=0)
            offs = (page * PAGE + n % PAGE)[:, None] * D + d[None, :]
        else:
            offs = kv_base + n[:, None] * D + d[None, :]
        k = tl.load(k_ptr + offs, mask=n_mask[:, None], other=0.0, cache_modifier=KV_CACHE)
        v = tl.load(v_ptr + offs, mask=n_mask[:, None], other=0.0, cache_modifier=KV_CACHE)
        m_i, l_i, acc = _softmax_tile(q, k, v, n_mask, m_i, l_i, acc, qk_scale, UPCAST)
    return m_i, l_i, acc


@triton.jit
def _decode_combine_kernel(
    part_acc_ptr, part_ml_ptr, o_ptr, splits, D: tl.constexpr, BLOCK_S: tl.constexpr, PDL: tl.constexpr
):
    # A kernel of its own, not the last split's tail: in GPT-2's decode step (docs/perf-notes/
    # models.md) a last-arrival combine inside the split kernel made attention slower,
    # 0.115 -> 0.128 ms over 12 layers: its serial tail costs more than one more graph launch.
    if PDL:
        launch_next()
        gdc_wait()
    row = tl.program_id(0)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, D)
    s_mask = s < splits
    part = row * splits + s
    m = tl.load(part_ml_ptr + part * 2, mask=s_mask, other=float("-inf"))
    row_sum = tl.load(part_ml_ptr + part * 2 + 1, mask=s_mask, other=0.0)
    acc = tl.load(part_acc_ptr + part[:, None] * D + d[None, :], mask=s_mask[:, None], other=0.0)
    tl.store(o_ptr + row * D + d, combine(m, row_sum, acc).to(o_ptr.dtype.element_ty))


@triton.jit
def combine(m, row_sum, acc):
    """One head's output from its splits' partials (m [S], l [S], acc [S, D]), S padded with
    m = -inf: sum_i exp2(m_i - M) acc_i / sum_i exp2(m_i - M) l_i, M the largest partial max."""
    weight = tl.exp2(m - tl.max(m, axis=0))
    return tl.sum(acc * weight[:, None], axis=0) / tl.sum(row_sum * weight, axis=0)


def triton_decode(q, k, v, ws: DecodeWorkspace, block_n: int = 64, num_stages: int = 3, num_warps: int = 4,
                  preload: bool | None = None):  # fmt: skip
    """Decode attention over a dense cache, or a length-prefix view of a preallocated one (read in
    place). ``preload`` (default: with PDL) loads each program's chunk into registers before the
    wait where it fits, all but the newest row."""
    h_kv, c = k.shape[1], k.shape[2]
    q, q_stride = q_layout(q)
    k, v, rows = cache_layout(k, v)
    return _decode(q, q_stride, k, v, None, 0, rows, h_kv, c, ws, block_n, num_stages, num_warps, preload)


def triton_paged_decode(q, k_pool, v_pool, block_table, h_kv: int, length: int, ws: DecodeWorkspace,
                        block_n: int = 64, num_stages: int = 3, num_warps: int = 4,
                        preload: bool | None = None):  # fmt: skip
    """Decode attention read from a paged cache in place (vLLM's block table, one kv head per page).

    k_pool and v_pool are [pages, PAGE, 1, D] (kv_cache's pool with one head per page);
    block_table is int32 [B * h_kv, pages per head]: row b * h_kv + hk lists the physical pages
    holding that (sequence, kv head)'s tokens 0, PAGE, 2 PAGE, ...; the first ``length`` are read.
    """
    q, q_stride = q_layout(q)
    page = k_pool.shape[1]
    if k_pool.shape[2] != 1 or not (k_pool.is_contiguous() and v_pool.is_contiguous()):
        raise ValueError("paged decode reads pools of [pages, PAGE, 1, D], contiguous")
    if block_table.shape[1] * page < length:
        raise ValueError(f"the block table holds {block_table.shape[1] * page} tokens, fewer than {length}")
    return _decode(q, q_stride, k_pool, v_pool, block_table, page, 0, h_kv, length, ws, block_n, num_stages,
                   num_warps, preload)  # fmt: skip


# K and V elements a program holds in registers when it loads its chunk before the PDL wait: two
# 64-key tiles at D=64, 32 KB in bf16, 64 registers a thread at 4 warps.
MAX_PRELOAD_ELEMENTS = 2 * 64 * 64


def preload_tiles(chunk: int, block_n: int, d: int) -> int:
    """Key tiles a program of ``chunk`` keys holds in registers; 0 where they do not fit."""
    tiles = chunk // block_n
    return tiles if chunk % block_n == 0 and tiles * block_n * d <= MAX_PRELOAD_ELEMENTS else 0


def preload_plan(batch: int, h_kv: int, c: int, d: int, sms: int, block: int = 64) -> tuple[int, int]:
    """split_plan with chunks as short as the keys a program holds in registers (MAX_PRELOAD_ELEMENTS),
    where that is below MIN_SPLIT_TOKENS: at D = 128 a 64-key chunk loads before the PDL wait, a
    128-key one streams only after it. Only a short cache changes (fewer keys than 4 programs an SM
    of MIN_SPLIT_TOKENS would take): the 8B's decode at a 576-token context gets 9 splits of 64 keys,
    not 5 of 128, its K and V in flight while QKV still runs (docs/perf-notes/models.md)."""
    fits = MAX_PRELOAD_ELEMENTS // d // block * block
    return split_plan(batch, h_kv, c, sms, block, min(MIN_SPLIT_TOKENS, fits) if fits else MIN_SPLIT_TOKENS)


def _decode(q, q_stride, k, v, table, page, rows, h_kv, c, ws, block_n, num_stages, num_warps, preload=None):
    b, h, _, d = q.shape
    g = h // h_kv
    paged = table is not None
    pdl = pdl_enabled(q.device)
    tiles = preload_tiles(ws.chunk, block_n, d) if (pdl if preload is None else preload) else 0
    _decode_split_kernel[(b * h_kv, ws.splits)](
        q, k, v, ws.part_acc, ws.part_ml, table if paged else ws.part_ml,
        c, ws.chunk, ws.splits, LOG2E / math.sqrt(d), q_stride, rows, table.stride(0) if paged else 0,
        H_KV=h_kv, G=g, D=d,
        BLOCK_G=max(16, triton.next_power_of_2(g)),  # tl.dot needs at least 16 rows
        BLOCK_N=block_n,
        PAGED=paged, PAGE=max(page, 1),
        UPCAST=interpreting(),
        PDL=pdl,
        PREFETCH_PAGES=16,  # 256 tokens of the chunk at PAGE=16: a hint, the loop loads the rest
        ELEM_BYTES=k.element_size(),
        PRELOAD=tiles,
        num_warps=num_warps,
        num_stages=num_stages,  # 3 stages of 32 KB (K and V tiles) in flight hide HBM latency
        **pdl_launch(pdl),
    )  # fmt: skip
    _decode_combine_kernel[(b * h,)](
        ws.part_acc, ws.part_ml, ws.out, ws.splits, D=d, BLOCK_S=max(2, triton.next_power_of_2(ws.splits)), PDL=pdl,
        **pdl_launch(pdl),
    )  # fmt: skip
    return ws.out


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case):
    """flash-decoding: split-cache online softmax, then a combine kernel"""
    q, k, v = case["q"], case["k"], case["v"]
    ws = DecodeWorkspace(q, k.shape[1], k.shape[2])
    return lambda: triton_decode(q, k, v, ws)


PAGE = BLOCK_SIZE  # tokens per page: kv_cache's pages (vLLM's default, 16)


def paged_copy(k: torch.Tensor, v: torch.Tensor, generator: torch.Generator | None = None):
    """(k_pool, v_pool, block_table): the dense [B, H_kv, C, D] cache scattered over pages drawn by
    a random permutation, one (sequence, kv head) per page, as a paged cache holds it."""
    b, h_kv, c, d = k.shape
    per_head = -(-c // PAGE)
    pages = b * h_kv * per_head
    order = torch.randperm(pages, generator=generator, device="cpu").to(k.device)
    pools = []
    for dense in (k, v):
        padded = torch.zeros((b * h_kv, per_head * PAGE, d), dtype=dense.dtype, device=dense.device)
        padded[:, :c] = dense.reshape(b * h_kv, c, d)
        pool = torch.empty((pages, PAGE, 1, d), dtype=dense.dtype, device=dense.device)
        pool[order] = padded.view(pages, PAGE, 1, d)
        pools.append(pool)
    return pools[0], pools[1], order.view(b * h_kv, per_head).to(torch.int32)


@FAMILY.variant("triton_paged", kind="triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_paged_variant(case):
    """flash-decoding read through a block table from 16-token pages scattered at random (vLLM's paged cache)"""
    # The block table adds 4 bytes a page (0.05% of the K and V bytes at D=128): the cost stays the family's.
    q, k = case["q"], case["k"]
    h_kv, c = k.shape[1], k.shape[2]
    k_pool, v_pool, table = paged_copy(k, case["v"], torch.Generator().manual_seed(0))
    ws = DecodeWorkspace(q, h_kv, c)
    return lambda: triton_paged_decode(q, k_pool, v_pool, table, h_kv, c, ws)
