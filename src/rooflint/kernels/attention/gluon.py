"""Attention forward for Hopper in Gluon (`triton.experimental.gluon`): the `triton_gluon` variant.

Why Gluon. Triton 3.6's compiler admits one loop shape for its warp specialization and does not
compile FlashAttention-3's overlap within a warpgroup (docs/perf-notes/attention.md), so
`triton_hopper` stops near 0.85-0.9x cuDNN. Gluon is Triton's lower-level language: the kernel
states its own layouts, shared-memory buffers, barriers and schedule, and Triton compiles it.

The schedule (FlashAttention-3's, as our CUDA `cuda_hopper` also follows):
- a producer warp issues TMA copies of K and V into a STAGES-deep ring, each stage with a "full"
  mbarrier (bytes landed) and an "empty" one (count 2: one arrive per consumer);
- two consumer warpgroups, 64 query rows each, run the online softmax unsynchronized with each
  other, so one's softmax can run under the other's GEMMs (in a first version both met at a CTA
  barrier every tile to refill the ring: 0.82x cuDNN against 1.00x for this one, H100, D=128);
- within a warpgroup, the next tile's S = Q K^T (asynchronous wgmma) is issued before this tile's
  P V, and the wait leaves P V in flight while the next softmax runs;
- K's stage is released as soon as S is done, V's after P V: the producer refills each early;
- the mask only on the tiles that need it (the ragged last tile, the causal diagonal), and causal
  query blocks longest first;
- without the causal mask, the tiles of the grid's last, partial wave run in key ranges on the SMs
  that wave leaves idle and are merged after (gluon_tail.py): 4 tiles of `--size large`'s
  4,096 on 132 SMs, which would otherwise run alone while 128 SMs idle.

Three 64-row consumers (FA3's tile at D=64) are a Tiles option; two 64-row consumers are the
default (docs/perf-notes has the comparison).

Gluon has no CPU interpreter: tests/test_gluon_attention.py compiles the kernel for sm_90a on the
CPU (no GPU needed to compile), and the GPU tier (tests/gpu/test_gpu_attention_gluon.py) checks it
against float64 on ragged N, both masks, fp16 and bf16, and for identical bits over repeated calls.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.kernels.attention import FAMILY, gluon_tail
from rooflint.kernels.attention.fp8 import HALF_DTYPES
from rooflint.kernels.common.gluon import (  # Gluon's Hopper ops where this Triton has them
    HAS_GLUON,
    TensorDescriptor,
    gl,
    gluon,
    mbarrier,
    sm90_reason,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from rooflint.kernels.common.gluon import tma_load as _tma_load

LOG2E = 1.4426950408889634
HALF_M = 64  # query rows a consumer warpgroup owns (one wgmma's M)


@dataclass(frozen=True)
class Tiles:
    """A head dim's CTA shape, sized to one CTA per SM (227 KB of shared memory, 64K registers)."""

    block_n: int  # keys a tile
    stages: int  # K/V ring depth
    consumers: int = 2  # 64-row consumer warpgroups: BLOCK_M = 64 x consumers query rows a CTA
    consumer_regs: int = 232  # registers a consumer thread (setmaxnreg)
    producer_regs: int = 40  # registers a producer thread: addresses, the loop and the barriers' phases

    @property
    def block_m(self) -> int:
        return HALF_M * self.consumers

    def __str__(self) -> str:
        return f"{self.block_m}x{self.block_n} s{self.stages} r{self.consumer_regs}/{self.producer_regs}"


# Shared memory is Q (BLOCK_M x D) plus the ring, stages x 2 x (block_n x D), 2 bytes an element:
#   D=64:  Q 16 KB + 2 x 32 KB;  D=128: Q 32 KB + 2 x 64 KB;
#   D=256: Q 64 KB + 2 x 64 KB with 64-key tiles (128-key tiles would need 256 KB), as FA3 shrinks
#   its key tile at D=256. The O accumulator (64 x D fp32 a warpgroup) is 128 registers a thread
#   at D=256, inside the 232 the consumers are given.
#   Of the others that fit, a third ring stage, 64-key tiles and three consumers were each slower
#   (docs/perf-notes).
TILES = {64: Tiles(block_n=128, stages=2), 128: Tiles(block_n=128, stages=2), 256: Tiles(block_n=64, stages=2)}
HEAD_DIMS = tuple(TILES)


if HAS_GLUON:

    @gluon.jit
    def _softmax_tile(s, m_i, l_i, tile, offs_m, n, qk_scale, BLOCK_N: gl.constexpr, MASK: gl.constexpr,
                      CAUSAL: gl.constexpr, col_layout: gl.constexpr):  # fmt: skip
        """One key tile of the online softmax (base 2): P, the new max and sum, and the rescale alpha."""
        if MASK:
            cols = tile * BLOCK_N + gl.arange(0, BLOCK_N, layout=col_layout)
            if CAUSAL:  # top-left aligned, as SDPA's is_causal
                keep = gl.expand_dims(cols < n, 0) & (gl.expand_dims(cols, 0) <= gl.expand_dims(offs_m, 1))
            else:
                keep = gl.expand_dims(cols < n, 0)
            s = gl.where(keep, s, gl.full(s.shape, float("-inf"), gl.float32, s.type.layout))
        m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
        p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
        alpha = gl.exp2(m_i - m_new)
        return p, m_new, l_i * alpha + gl.sum(p, axis=1), alpha

    @gluon.jit
    def _softmax_step(s, m_i, l_i, tile, mask_from, offs_m, n, qk_scale, BLOCK_N: gl.constexpr,
                      CAUSAL: gl.constexpr, col_layout: gl.constexpr):  # fmt: skip
        """_softmax_tile with the mask only from tile `mask_from` on (the ragged last tile, the diagonal)."""
        if tile >= mask_from:
            p, m_new, l_new, alpha = _softmax_tile(s, m_i, l_i, tile, offs_m, n, qk_scale, BLOCK_N, True, CAUSAL,
                                                   col_layout)  # fmt: skip
        else:
            p, m_new, l_new, alpha = _softmax_tile(s, m_i, l_i, tile, offs_m, n, qk_scale, BLOCK_N, False, CAUSAL,
                                                   col_layout)  # fmt: skip
        return p, m_new, l_new, alpha

    @gluon.jit
    def _ws_load(k_desc, v_desc, k_smem, v_smem, k_full, v_full, k_empty, v_empty, row0, first_tile, n_tiles):
        # Constants come from types here: a worker partition's tuple arguments lose their constexpr-ness.
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        STAGES: gl.constexpr = k_smem.type.shape[0]
        for i in range(n_tiles):
            stage = i % STAGES
            # A fresh barrier's "previous" phase (parity 1) counts as complete: the first round passes.
            free = ((i // STAGES) & 1) ^ 1
            key_row = row0 + (first_tile + i) * BLOCK_N
            mbarrier.wait(k_empty.index(stage), free)
            mbarrier.expect(k_full.index(stage), k_desc.block_type.nbytes)
            _tma_load(k_desc, [key_row, 0], k_full.index(stage), k_smem.index(stage))
            mbarrier.wait(v_empty.index(stage), free)
            mbarrier.expect(v_full.index(stage), v_desc.block_type.nbytes)
            _tma_load(v_desc, [key_row, 0], v_full.index(stage), v_smem.index(stage))

    @gluon.jit
    def _ws_consume(q_smem, q_bar, k_smem, v_smem, k_full, v_full, k_empty, v_empty, o_ptr, part_o, part_ml, ml_stride,
                    part_row, row0, first_row, n, first_tile, n_tiles, mask_from, qk_scale,
                    CAUSAL: gl.constexpr):  # fmt: skip
        """One warpgroup's 64 query rows over key tiles first_tile.. (n_tiles of them), released by
        mbarriers. A CTA of the split tail (part_row >= 0) writes its unnormalized O, m and l there
        (gluon_tail.py) instead of O."""
        STAGES: gl.constexpr = k_smem.type.shape[0]
        BLOCK_M: gl.constexpr = q_smem.type.shape[0]
        D: gl.constexpr = q_smem.type.shape[1]
        BLOCK_N: gl.constexpr = k_smem.type.shape[1]
        dtype: gl.constexpr = q_smem.dtype
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
        )
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16]
        )
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
        col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
        offs_m = first_row + gl.arange(0, BLOCK_M, layout=row_layout)
        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=row_layout)
        l_i = gl.zeros([BLOCK_M], gl.float32, layout=row_layout)
        acc = gl.zeros([BLOCK_M, D], gl.float32, layout=o_layout)
        s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)

        mbarrier.wait(q_bar, 0)
        mbarrier.wait(k_full.index(0), 0)
        s_tok = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(0, deps=(s_tok,))
        mbarrier.arrive(k_empty.index(0), count=1)
        p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, first_tile, mask_from, offs_m, n, qk_scale, BLOCK_N, CAUSAL,
                                           col_layout)  # fmt: skip
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        for i in range(1, n_tiles):  # i: the ring's count; the key tile is first_tile + i
            stage = i % STAGES
            prev = (i - 1) % STAGES
            mbarrier.wait(k_full.index(stage), (i // STAGES) & 1)
            s_tok = warpgroup_mma(q_smem, k_smem.index(stage).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            mbarrier.wait(v_full.index(prev), ((i - 1) // STAGES) & 1)
            acc_tok = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
            s = warpgroup_mma_wait(1, deps=(s_tok,))
            mbarrier.arrive(k_empty.index(stage), count=1)
            p, m_i, l_i, alpha = _softmax_step(
                s, m_i, l_i, first_tile + i, mask_from, offs_m, n, qk_scale, BLOCK_N, CAUSAL, col_layout
            )
            acc = warpgroup_mma_wait(0, deps=(acc_tok,))
            mbarrier.arrive(v_empty.index(prev), count=1)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p_op = gl.convert_layout(p.to(dtype), p_layout)
        last = (n_tiles - 1) % STAGES
        mbarrier.wait(v_full.index(last), ((n_tiles - 1) // STAGES) & 1)
        acc_tok = warpgroup_mma(p_op, v_smem.index(last), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc_tok,))
        # Released too: under the causal mask this may not be the CTA's last tile (_consumer_tiles), and
        # the producer refills its stage for a later one (without this, 192x64 tiles at D=128 hung).
        mbarrier.arrive(v_empty.index(last), count=1)

        store_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        dims = gl.arange(0, D, layout=gl.SliceLayout(0, store_layout))
        if part_row >= 0:  # a key range of a split tile: the merge normalizes
            ml_rows = part_row + gl.arange(0, BLOCK_M, layout=row_layout)
            gl.store(part_ml + ml_rows, m_i)
            gl.store(part_ml + ml_stride + ml_rows, l_i)
            p_rows = part_row + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, store_layout))
            gl.store(
                part_o + gl.expand_dims(p_rows * D, 1) + gl.expand_dims(dims, 0), gl.convert_layout(acc, store_layout)
            )
        else:
            out = acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 1)
            out = gl.convert_layout(out.to(dtype), store_layout)
            rows = first_row + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, store_layout))
            offsets = gl.expand_dims((row0 + rows).to(gl.int64) * D, 1) + gl.expand_dims(dims, 0)
            gl.store(o_ptr + offsets, out, mask=gl.expand_dims(rows < n, 1))

    # One wrapper per mask: a constexpr handed to a warp_specialize partition arrives as a runtime
    # value (Triton 3.6), and a constexpr-selected function is refused, so the mask is fixed here.
    @gluon.jit
    def _ws_consume_causal(q_smem, q_bar, k_smem, v_smem, k_full, v_full, k_empty, v_empty, o_ptr, part_o,
                           part_ml, ml_stride, part_row, row0, first_row, n, first_tile, n_tiles, mask_from,
                           qk_scale):  # fmt: skip
        _ws_consume(q_smem, q_bar, k_smem, v_smem, k_full, v_full, k_empty, v_empty, o_ptr, part_o, part_ml, ml_stride,
                    part_row, row0, first_row, n, first_tile, n_tiles, mask_from, qk_scale, True)  # fmt: skip

    @gluon.jit
    def _ws_consume_full(q_smem, q_bar, k_smem, v_smem, k_full, v_full, k_empty, v_empty, o_ptr, part_o,
                         part_ml, ml_stride, part_row, row0, first_row, n, first_tile, n_tiles, mask_from,
                         qk_scale):  # fmt: skip
        _ws_consume(q_smem, q_bar, k_smem, v_smem, k_full, v_full, k_empty, v_empty, o_ptr, part_o, part_ml, ml_stride,
                    part_row, row0, first_row, n, first_tile, n_tiles, mask_from, qk_scale, False)  # fmt: skip

    @gluon.jit
    def _consumer_tiles(n_tiles, first, n, BLOCK_N: gl.constexpr, HALF: gl.constexpr, CAUSAL: gl.constexpr):
        """The key tiles a consumer whose rows start at `first` needs: under the causal mask its rows
        may end tiles before the CTA's last (64-row consumers against 64-key tiles at D=256). The
        tiles it skips are the ring's last, so no refill waits on a release that does not come
        (prepare checks that they are at most STAGES)."""
        if CAUSAL:
            n_tiles = gl.cdiv(gl.minimum(first + HALF, n), BLOCK_N)
        return n_tiles

    @gluon.jit
    def _attn_fwd_ws(q_desc, k_desc, v_desc, o_ptr, part_o, part_ml, n, qk_scale, regular, splits, split_tiles,
                     CAUSAL: gl.constexpr, STAGES: gl.constexpr, CONSUMERS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                     PRODUCER_REGS: gl.constexpr, num_warps: gl.constexpr):  # fmt: skip
        """One CTA: BLOCK_M query rows of one head over all their key tiles (a tile of the grid's first
        `regular`), or over one key range of a tile of the split tail (gluon_tail.py)."""
        HALF: gl.constexpr = q_desc.block_type.shape[0]  # 64 rows a consumer
        BLOCK_M: gl.constexpr = CONSUMERS * HALF
        D: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        dtype: gl.constexpr = q_desc.dtype
        num_m = gl.cdiv(n, BLOCK_M)
        pid = gl.program_id(0)
        first_tile = pid * 0  # int32 tensors, as the branch below assigns: scf.if needs one type
        n_tiles = gl.cdiv(n, BLOCK_N)
        part_row = pid * 0 - (1 << 30)  # < 0 for every consumer (row + c * HALF): a whole tile's CTA writes O
        tile = pid
        if pid >= regular:
            unit = pid - regular
            tile = regular + unit // splits
            first_tile = (unit % splits) * split_tiles
            n_tiles = gl.minimum(split_tiles, n_tiles - first_tile)
            part_row = unit * BLOCK_M
        # Tiles in launch order: a head's row blocks in turn (under the causal mask longest first).
        if CAUSAL:
            start_m = num_m - 1 - tile % num_m
            hi = gl.minimum((start_m + 1) * BLOCK_M, n)
            mask_from = gl.minimum(start_m * BLOCK_M, n) // BLOCK_N
            n_tiles = gl.cdiv(hi, BLOCK_N)
        else:
            start_m = tile % num_m
            mask_from = n // BLOCK_N
        row0 = (tile // num_m) * n
        ml_stride = (gl.num_programs(0) - regular) * BLOCK_M  # m's rows, then l's, in part_ml

        q_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, HALF, D], q_desc.layout)
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], v_desc.layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        k_full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(q_bar, count=1)
        for s in gl.static_range(STAGES):
            mbarrier.init(k_full.index(s), count=1)
            mbarrier.init(v_full.index(s), count=1)
            mbarrier.init(k_empty.index(s), count=CONSUMERS)  # one arrive per consumer warpgroup
            mbarrier.init(v_empty.index(s), count=CONSUMERS)
        mbarrier.expect(q_bar, CONSUMERS * q_desc.block_type.nbytes)
        for c in gl.static_range(CONSUMERS):
            _tma_load(q_desc, [row0 + start_m * BLOCK_M + c * HALF, 0], q_bar, q_smem.index(c))

        first = start_m * BLOCK_M
        tiles0 = _consumer_tiles(n_tiles, first, n, BLOCK_N, HALF, CAUSAL)
        tiles1 = _consumer_tiles(n_tiles, first + HALF, n, BLOCK_N, HALF, CAUSAL)
        consume0 = (q_smem.index(0), q_bar, k_smem, v_smem, k_full, v_full, k_empty, v_empty, o_ptr, part_o, part_ml,
                    ml_stride, part_row, row0, first, n, first_tile, tiles0, mask_from, qk_scale)  # fmt: skip
        consume1 = (q_smem.index(1), q_bar, k_smem, v_smem, k_full, v_full, k_empty, v_empty, o_ptr, part_o, part_ml,
                    ml_stride, part_row + HALF, row0, first + HALF, n, first_tile, tiles1, mask_from,
                    qk_scale)  # fmt: skip
        load = (k_desc, v_desc, k_smem, v_smem, k_full, v_full, k_empty, v_empty, row0, first_tile, n_tiles)
        if CONSUMERS == 3:
            tiles2 = _consumer_tiles(n_tiles, first + 2 * HALF, n, BLOCK_N, HALF, CAUSAL)
            consume2 = (q_smem.index(2), q_bar, k_smem, v_smem, k_full, v_full, k_empty, v_empty, o_ptr, part_o,
                        part_ml, ml_stride, part_row + 2 * HALF, row0, first + 2 * HALF, n, first_tile, tiles2,
                        mask_from, qk_scale)  # fmt: skip
            if CAUSAL:
                gl.warp_specialize(
                    [(_ws_consume_causal, consume0), (_ws_consume_causal, consume1), (_ws_consume_causal, consume2),
                     (_ws_load, load)], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS],
                )  # fmt: skip
            else:
                gl.warp_specialize(
                    [(_ws_consume_full, consume0), (_ws_consume_full, consume1), (_ws_consume_full, consume2),
                     (_ws_load, load)], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS],
                )  # fmt: skip
        else:
            if CAUSAL:
                gl.warp_specialize(
                    [(_ws_consume_causal, consume0), (_ws_consume_causal, consume1), (_ws_load, load)], [4, 1],
                    [CONSUMER_REGS, PRODUCER_REGS],
                )  # fmt: skip
            else:
                gl.warp_specialize(
                    [(_ws_consume_full, consume0), (_ws_consume_full, consume1), (_ws_load, load)], [4, 1],
                    [CONSUMER_REGS, PRODUCER_REGS],
                )  # fmt: skip


def unsupported_reason(device: torch.device, head_dim: int, dtype: torch.dtype) -> str | None:
    """Why the Gluon attention cannot run here (None: it can)."""
    reason = sm90_reason(device, "attention", dtype)
    if reason:
        return reason
    if head_dim not in HEAD_DIMS:
        return f"the Gluon attention is built for head_dim {' or '.join(map(str, HEAD_DIMS))}, not {head_dim}"
    return None


def prepare(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, tiles: Tiles | None = None,
            split_tail: bool = True) -> Callable[[], torch.Tensor]:  # fmt: skip
    """The launch over contiguous [B, H, N, D] q, k, v: ``prepare(q, k, v, causal)()`` -> O.
    `tiles` overrides the head dim's TILES entry (to measure others);
    split_tail=False runs the grid's partial wave whole (gluon_tail.py), to time both."""
    b, h, n, d = q.shape
    tiles = tiles or TILES[d]
    # Under the causal mask a consumer may skip the CTA's last key tiles (_consumer_tiles): never more
    # than the ring holds, or the producer would wait for that consumer to release a tile it skipped.
    if math.ceil((tiles.block_m - HALF_M) / tiles.block_n) > tiles.stages:
        raise ValueError(f"{tiles}: a consumer could skip more key tiles than the ring's {tiles.stages} stages")
    rows = b * h * n
    dtype = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16
    # Q in 64-row boxes, one per consumer; K and V in block_n-row boxes. Rows past a head's N are the
    # next head's (or zeros past the tensor): masked to probability 0, never stored.
    q_box, kv_box = [HALF_M, d], [tiles.block_n, d]
    q_desc = TensorDescriptor(
        q.view(rows, d), [rows, d], [d, 1], q_box, gl.NVMMASharedLayout.get_default_for(q_box, dtype)
    )
    kv_layout = gl.NVMMASharedLayout.get_default_for(kv_box, dtype)
    k_desc, v_desc = (TensorDescriptor(t.view(rows, d), [rows, d], [d, 1], kv_box, kv_layout) for t in (k, v))
    out = torch.empty_like(q)
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    tile_count = math.ceil(n / tiles.block_m) * b * h
    key_tiles = math.ceil(n / tiles.block_n)
    tail_plan = gluon_tail.plan(tile_count, key_tiles, sms, causal or not split_tail)
    part_o, part_ml = gluon_tail.partials(tail_plan, tiles.block_m, d, q.device)
    scale = LOG2E / math.sqrt(d)

    def run() -> torch.Tensor:
        _attn_fwd_ws[(tail_plan.grid,)](
            q_desc, k_desc, v_desc, out, part_o, part_ml, n, scale, tail_plan.regular, tail_plan.splits,
            tail_plan.split_tiles, bool(causal), tiles.stages, tiles.consumers, tiles.consumer_regs,
            tiles.producer_regs, num_warps=4,
        )  # fmt: skip
        if tail_plan.tail:
            gluon_tail.merge(tail_plan, part_o, part_ml, out, n, tiles.block_m)
        return out

    return run


def build_variant(case) -> Callable[[], torch.Tensor]:
    """The `triton_gluon` variant: skipped with the reason wherever it cannot run."""
    q, k, v = case["q"], case["k"], case["v"]
    reason = unsupported_reason(case.device, q.shape[-1], q.dtype)
    if reason:
        raise VariantSkipped(reason)
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
        raise VariantSkipped("the Gluon attention takes contiguous q, k and v (TMA row strides)")
    return prepare(q, k, v, case.params["causal"])


# Gluon (Triton's lower-level language), sm_90: a TMA producer warp, two unsynchronized consumer
# warpgroups, the next tile's Q K^T under this tile's softmax.
@FAMILY.variant("triton_gluon", kind="triton", needs=(NEEDS_CUDA, NEEDS_TRITON), dtypes=HALF_DTYPES)
def triton_gluon_variant(case):
    """sm_90 only: Gluon FlashAttention-3 schedule (producer warp, two consumer warpgroups, S ahead of P V)"""
    return build_variant(case)
