"""Y = GELU_tanh(X W^T + b) on sm_90 as a persistent ping-pong Gluon GEMM (CUTLASS's schedule).

Why. At GPT-2's MLP shape (1024x768 -> 3072) the cooperative Gluon GEMM (_gemm_gluon.py) runs one
128x192 tile per SM, its two consumer warpgroups side by side on it: the tile's epilogue (bias, GELU
on the 16-lane MUFU, ~1,500 cycles an SM, and the store) starts only after the last wgmma, and no
next tile runs under it. Here each consumer warpgroup owns whole tiles, half as wide (128x96): a CTA
takes two tiles at GPT-2's shape, one per consumer, and the consumers take turns on the tensor cores
(one warpgroup's wgmmas can keep all four of an SM's tensor cores busy). The first consumer's
epilogue then runs under the second's main loop, so only half an epilogue is exposed. The cost: X is
read from L2 once per tile, 448 rows a CTA against 320.

- A producer warp walks the CTA's tiles in order, filling one STAGES-deep ring of (X 128x64, W 96x64)
  stages; each stage has a "full" mbarrier (bytes landed) and an "empty" one (count 1: one consumer
  uses a stage).
- Consumer w takes the CTA's tiles w, w + 2, ...: the ring hands it its stages in that order, so the
  turns follow from the ring, with no ordering barrier between the consumers.
- The grid is min(SMs, ceil(tiles / 2)): every CTA gets at least two tiles where there are enough.

Gluon has no CPU interpreter: tests/test_gluon_gemm.py compiles it for sm_90a on the CPU, and the GPU
tier (tests/gpu/test_gpu_gemm_gluon.py) checks it against float64 on ragged shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from rooflint.kernels._gemm_gluon import _gelu_tanh
from rooflint.kernels._gluon import (  # Gluon's Hopper ops where this Triton has them
    HAS_GLUON,
    TensorDescriptor,
    fence_async_shared,
    gl,
    gluon,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from rooflint.kernels._gluon import tma_load as _tma_load
from rooflint.kernels._gluon import tma_store as _tma_store

BLOCK_M = 128  # one consumer warpgroup's tile rows: two m64 wgmmas a K step
# A tile's columns as a 64- and a 32-wide wgmma (TMA boxes are powers of two): 96 columns, so
# 8 x 32 = 256 tiles at GPT-2's shape, two per CTA on 128 SMs.
WIDTHS = (64, 32)
BLOCK_K = 64  # 128 bytes of bf16: one 128-byte swizzle row
# Shared memory: STAGES x (X 128x64 + W 96x64) x 2 bytes = 28 KB a stage, plus one 128x96 output
# tile per consumer (48 KB): 6 stages take 216 KB of the SM's 227.
STAGES = 6


if HAS_GLUON:

    @gluon.jit
    def _tile_origin(tile, tiles_m, tiles_n, BM: gl.constexpr, BN: gl.constexpr):
        # Grouped raster: consecutive tiles walk down GROUP_M tile rows, then step a W panel right,
        # so the CTAs resident at once share X and W panels in L2.
        GROUP_M: gl.constexpr = 8
        group = tile // (GROUP_M * tiles_n)
        first_m = group * GROUP_M
        rows_in_group = gl.minimum(tiles_m - first_m, GROUP_M)
        in_group = tile % (GROUP_M * tiles_n)
        return (first_m + in_group % rows_in_group) * BM, (in_group // rows_in_group) * BN

    @gluon.jit
    def _pp_load(x_desc, w_desc, w2_desc, x_smem, w_smem, w2_smem, full, empty, tiles_m, tiles_n, k_tiles):
        # Constants come from types here: a worker partition's arguments lose their constexpr-ness.
        BM: gl.constexpr = x_desc.block_type.shape[0]
        BK: gl.constexpr = x_desc.block_type.shape[1]
        BN: gl.constexpr = w_desc.block_type.shape[0]
        BN2: gl.constexpr = w2_desc.block_type.shape[0]
        STAGES: gl.constexpr = w_smem.type.shape[0]
        step = 0  # the ring's position, counted over all of this CTA's tiles
        for tile in range(gl.program_id(0), tiles_m * tiles_n, gl.num_programs(0)):
            off_m, off_n = _tile_origin(tile, tiles_m, tiles_n, BM, BN + BN2)
            for kt in range(k_tiles):
                stage = step % STAGES
                # A fresh barrier's "previous" phase (parity 1) counts as complete: the first round passes.
                mbarrier.wait(empty.index(stage), ((step // STAGES) & 1) ^ 1)
                # TMA counts a whole box's bytes even where it zero-fills past M, N or K.
                mbarrier.expect(
                    full.index(stage), x_desc.block_type.nbytes + w_desc.block_type.nbytes + w2_desc.block_type.nbytes
                )
                k = kt * BK
                _tma_load(x_desc, [off_m, k], full.index(stage), x_smem.index(stage))
                _tma_load(w_desc, [off_n, k], full.index(stage), w_smem.index(stage))
                _tma_load(w2_desc, [off_n + BN, k], full.index(stage), w2_smem.index(stage))
                step += 1

    @gluon.jit
    def _pp_mma(x_smem, w_smem, w2_smem, full, empty, turn, y_desc, y2_desc, y_smem, y2_smem, b_ptr, N, tiles_m,
                tiles_n, k_tiles, consumer):  # fmt: skip
        """One consumer warpgroup's tiles (the CTA's tiles consumer, consumer + 2, ...): K loop, then
        bias + GELU stored by TMA while the other consumer's K loop runs."""
        BM: gl.constexpr = x_smem.type.shape[1]
        BN: gl.constexpr = w_smem.type.shape[1]
        BN2: gl.constexpr = w2_smem.type.shape[1]
        STAGES: gl.constexpr = w_smem.type.shape[0]
        layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
        layout2: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN2, 16]
        )
        grid = gl.num_programs(0)
        mine = 0  # this consumer's tiles so far
        for tile in range(gl.program_id(0) + consumer * grid, tiles_m * tiles_n, 2 * grid):
            off_m, off_n = _tile_origin(tile, tiles_m, tiles_n, BM, BN + BN2)
            # The ring position of this tile's first stage: the CTA's tiles before it, k_tiles each.
            order = 2 * mine + consumer
            step = order * k_tiles
            cols = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
            cols2 = off_n + BN + gl.arange(0, BN2, layout=gl.SliceLayout(0, layout2))
            bias = gl.load(b_ptr + cols, mask=cols < N, other=0.0).to(gl.float32)  # its round trip under the K loop
            bias2 = gl.load(b_ptr + cols2, mask=cols2 < N, other=0.0).to(gl.float32)
            acc = gl.zeros([BM, BN], gl.float32, layout=layout)
            acc2 = gl.zeros([BM, BN2], gl.float32, layout=layout2)
            # Wait for the turn: the other consumer has waited on every stage of the CTA's previous
            # tile. Without it a stage's "full" phase could alias: this consumer's first stage sits
            # k_tiles steps (two or more ring rounds) past the other's, and a parity wait cannot tell
            # round r from round r + 2. It also keeps the main loops in turns, the ping-pong.
            if order > 0:
                mbarrier.wait(turn.index(consumer), ((order - 1) // 2) & 1)
            for kt in range(k_tiles):
                stage = step % STAGES
                mbarrier.wait(full.index(stage), (step // STAGES) & 1)
                a = x_smem.index(stage)
                acc = warpgroup_mma(a, w_smem.index(stage).permute((1, 0)), acc, is_async=True)
                acc2 = warpgroup_mma(a, w2_smem.index(stage).permute((1, 0)), acc2, is_async=True)
                # At most this step's wgmmas in flight: the step before is done with its stage.
                acc, acc2 = warpgroup_mma_wait(2, deps=(acc, acc2))
                if kt > 0:
                    mbarrier.arrive(empty.index((step - 1) % STAGES), count=1)
                step += 1
            mbarrier.arrive(turn.index(1 - consumer), count=1)  # the other consumer's turn
            acc, acc2 = warpgroup_mma_wait(0, deps=(acc, acc2))
            # The last stage goes back too: the other consumer's tiles follow in the same ring.
            mbarrier.arrive(empty.index((step - 1) % STAGES), count=1)
            tma.store_wait(0)  # this consumer's previous tile has left its output buffers
            # The narrow part first: its TMA store runs while the wide part's GELU is computed.
            y2_smem.store(_gelu_tanh(acc2 + gl.expand_dims(bias2, 0)).to(y2_smem.dtype))
            fence_async_shared()
            _tma_store(y2_desc, [off_m, off_n + BN], y2_smem)
            y_smem.store(_gelu_tanh(acc + gl.expand_dims(bias, 0)).to(y_smem.dtype))
            fence_async_shared()
            _tma_store(y_desc, [off_m, off_n], y_smem)
            mine += 1
        tma.store_wait(0)

    @gluon.jit
    def _gemm_gelu_pingpong(x_desc, w_desc, w2_desc, y_desc, y2_desc, b_ptr, M, N, K, STAGES: gl.constexpr,
                            num_warps: gl.constexpr):  # fmt: skip
        BM: gl.constexpr = x_desc.block_type.shape[0]
        BK: gl.constexpr = x_desc.block_type.shape[1]
        BN: gl.constexpr = w_desc.block_type.shape[0]
        BN2: gl.constexpr = w2_desc.block_type.shape[0]
        dtype: gl.constexpr = x_desc.dtype
        tiles_m = gl.cdiv(M, BM)
        tiles_n = gl.cdiv(N, BN + BN2)
        k_tiles = gl.cdiv(K, BK)

        x_smem = gl.allocate_shared_memory(dtype, [STAGES, BM, BK], x_desc.layout)
        w_smem = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], w_desc.layout)
        w2_smem = gl.allocate_shared_memory(dtype, [STAGES, BN2, BK], w2_desc.layout)
        y_smem = gl.allocate_shared_memory(dtype, [2, BM, BN], y_desc.layout)
        y2_smem = gl.allocate_shared_memory(dtype, [2, BM, BN2], y2_desc.layout)
        full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())  # one per consumer
        for s in gl.static_range(STAGES):
            mbarrier.init(full.index(s), count=1)
            mbarrier.init(empty.index(s), count=1)  # one consumer uses a stage
        for c in gl.static_range(2):
            mbarrier.init(turn.index(c), count=1)

        mma0 = (x_smem, w_smem, w2_smem, full, empty, turn, y_desc, y2_desc, y_smem.index(0), y2_smem.index(0),
                b_ptr, N, tiles_m, tiles_n, k_tiles, 0)  # fmt: skip
        mma1 = (x_smem, w_smem, w2_smem, full, empty, turn, y_desc, y2_desc, y_smem.index(1), y2_smem.index(1),
                b_ptr, N, tiles_m, tiles_n, k_tiles, 1)  # fmt: skip
        load = (x_desc, w_desc, w2_desc, x_smem, w_smem, w2_smem, full, empty, tiles_m, tiles_n, k_tiles)
        gl.warp_specialize([(_pp_mma, mma0), (_pp_mma, mma1), (_pp_load, load)], [4, 1], [232, 40])


def descriptors(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, widths: tuple[int, int] = WIDTHS) -> tuple:
    """Host TMA descriptors: X in 128x64 boxes; W in two boxes of widths[0] and widths[1] rows (TMA
    boxes are powers of two: 96 = 64 + 32), Y in 128-row boxes of the same widths. Reads past M, N
    or K are zero-filled, stores past them dropped."""
    gdtype = gl.bfloat16 if x.dtype == torch.bfloat16 else gl.float16

    def describe(t: torch.Tensor, box: list[int]):
        return TensorDescriptor(
            t, list(t.shape), [t.shape[1], 1], box, gl.NVMMASharedLayout.get_default_for(box, gdtype)
        )

    wide, narrow = widths
    return (
        describe(x, [BLOCK_M, BLOCK_K]),
        describe(w, [wide, BLOCK_K]),
        describe(w, [narrow, BLOCK_K]),
        describe(out, [BLOCK_M, wide]),
        describe(out, [BLOCK_M, narrow]),
    )


def grid_size(m: int, n: int, sms: int, widths: tuple[int, int] = WIDTHS) -> int:
    """CTAs to launch: two tiles a CTA (one per consumer) where there are enough, never more CTAs
    than SMs (the kernel is persistent)."""
    tiles = math.ceil(m / BLOCK_M) * math.ceil(n / sum(widths))
    return max(1, min(sms, math.ceil(tiles / 2)))


def prepare(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, stages: int = STAGES, widths: tuple[int, int] = WIDTHS
) -> Callable[[], torch.Tensor]:
    """The launch over contiguous x [M, K], w [N, K], b [N]: ``prepare(x, w, b)()`` -> Y [M, N].
    Arguments other than the defaults are for scripts/device/gluon_gemm.py's sweep."""
    m, k = x.shape
    n = w.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    descs = descriptors(x, w, out, widths)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    grid = (grid_size(m, n, sms, widths),)

    def run() -> torch.Tensor:
        _gemm_gelu_pingpong[grid](*descs, b, m, n, k, stages, num_warps=4)
        return out

    return run
