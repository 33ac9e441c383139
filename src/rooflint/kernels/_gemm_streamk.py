"""Stream-K over the last waves of a persistent GEMM: `triton_wavefit`'s kernel where a single-block
tile leaves the SMs' last wave part empty (gelu_linear at 8192^3).

Why. 8192^3 in 128x256 tiles is 2048 tiles on 132 SMs: 15 whole waves and 68 tiles, so for the last
tile's time (~90 us of ~1.4 ms) 64 SMs idle, 3% of the run. cuBLAS's kernel at this size runs the same
256x128 tile count. Here the tiles of the whole waves but one are data-parallel, as before: each
program strides over them with the tile loop flattened into the K loop. The rest (one wave plus the
part-empty one, 200 tiles on 132 SMs) are cut along K: their K steps, laid end to end, are dealt out
evenly, so every program runs about 1.5 tiles' worth (194 of 128-step tiles here) and all finish
together (Osama et al., "Stream-K", PPoPP 2023; CUTLASS's hybrid data-parallel + stream-K schedule).

The fix-up. Each program's share is at least one tile's K steps, so a tile is cut at most once: its
head part (from K = 0) and its tail part belong to two programs. Each writes its fp32 partial tile to
its own slot of a workspace, then counts itself in on the tile's counter; the second to arrive adds
the other's slot to its own accumulator and runs the epilogue. Nobody waits on anybody (no spinning,
so the CPU interpreter, which runs the programs one after another, runs the same code), and the sum
head + tail is the same whichever arrives second: results are identical bits call after call. The
finishing program sets the counter back to zero, so the next launch (or a CUDA graph replay) finds
the workspace ready without a memset.

The cost. A cut tile moves two 128 KB fp32 partials through L2 (one written, one written and read
back), ~1-2 us of a program's ~140-us stream-K share; each part also fills the TMA pipeline afresh.
"""

from __future__ import annotations

import torch

from rooflint.core.triton_compat import tl, triton
from rooflint.kernels.gelu_linear import _dot_wt, _gelu_store, _load_bias, _tile_origin

# Below this many K steps a tile the partials' round trip is a large share of a part (GPT-2's K=768 is
# 12 steps: splitting its tail wave lost 9% there, _gemm_small.py). 8192^3 has 128.
MIN_K_STEPS = 32


def split_tiles(tiles: int, programs: int) -> tuple[int, int]:
    """(data-parallel tiles, stream-K tiles) for ``programs`` resident programs: every whole wave but
    the last stays data-parallel; that wave and the part-empty one after it are cut along K, which
    gives each program at least one tile's K steps. No stream-K when the waves are already whole."""
    if tiles <= programs or tiles % programs == 0:
        return tiles, 0
    data_parallel = (tiles // programs - 1) * programs
    return data_parallel, tiles - data_parallel


@triton.jit
def _gemm_gelu_streamk_kernel(
    x_desc, w_desc, y_desc, b_ptr, part_ptr, count_ptr, M, N, K, DP_TILES,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_STORE: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    # Data-parallel: whole tiles, the tile loop flattened into the K loop (as gelu_linear's `triton`).
    for tile in tl.range(pid, DP_TILES, programs, flatten=True):
        off_m, off_n = _tile_origin(tile, tiles_m, tiles_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(k_tiles):
            a = x_desc.load([off_m, kt * BLOCK_K])
            b = w_desc.load([off_n, kt * BLOCK_K])
            acc = _dot_wt(a, b, acc, UPCAST)
        _gelu_store(acc, _load_bias(b_ptr, off_n, N, BLOCK_N), off_m, off_n, y_desc, BLOCK_M, BLOCK_N, SPLIT_STORE,
                    not UPCAST)  # fmt: skip

    # Stream-K: the remaining tiles' K steps end to end, an even share [start, end) per program.
    steps = (tiles_m * tiles_n - DP_TILES) * k_tiles
    share = steps // programs
    extra = steps % programs
    start = pid * share + tl.minimum(pid, extra)
    end = start + share + (pid < extra).to(tl.int32)
    # Offsets of one fp32 tile in a workspace slot (row-major BLOCK_M x BLOCK_N).
    slot_offsets = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    step = start
    while step < end:
        t = step // k_tiles  # which stream-K tile
        k0 = step - t * k_tiles
        k1 = tl.minimum(k_tiles, k0 + end - step)
        off_m, off_n = _tile_origin(DP_TILES + t, tiles_m, tiles_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(k0, k1):
            a = x_desc.load([off_m, kt * BLOCK_K])
            b = w_desc.load([off_n, kt * BLOCK_K])
            acc = _dot_wt(a, b, acc, UPCAST)
        finish = (k1 - k0) == k_tiles
        if not finish:
            # A cut tile: slot 2t holds the head part (from K = 0), slot 2t + 1 the tail part.
            tl.store(part_ptr + (2 * t + (k0 > 0).to(tl.int32)) * (BLOCK_M * BLOCK_N) + slot_offsets, acc)
            # All the block's threads have stored before one thread counts the block in; its
            # acq_rel atomic publishes their stores (CUTLASS's semaphore: __syncthreads, then a
            # release by one thread) and, for the second to arrive, orders the loads after it.
            tl.debug_barrier()
            arrived = tl.atomic_add(count_ptr + t, 1, sem="acq_rel", scope="gpu")
            finish = arrived == 1
            if finish:
                other = (2 * t + (k0 == 0).to(tl.int32)) * (BLOCK_M * BLOCK_N)
                # .cg: from L2, where the other SM's stores are, never a stale L1 line.
                acc += tl.load(part_ptr + other + slot_offsets, cache_modifier=".cg")
                tl.atomic_xchg(count_ptr + t, 0, sem="relaxed", scope="gpu")  # ready for the next launch
        if finish:
            _gelu_store(acc, _load_bias(b_ptr, off_n, N, BLOCK_N), off_m, off_n, y_desc, BLOCK_M, BLOCK_N, SPLIT_STORE,
                        not UPCAST)  # fmt: skip
        step += k1 - k0


class StreamKLaunch:
    """The launch of a single-block tile with a stream-K tail: workspace and counters made once (the
    counters zeroed; each launch leaves them zeroed again)."""

    def __init__(self, x, w, b, out, descriptors, tile, grid: int, split_store: bool, upcast: bool):
        m, k = x.shape
        n = w.shape[0]
        self.dp_tiles, self.sk_tiles = split_tiles(tile.tiles(m, n), grid)
        self.args = (*descriptors, b)
        self.shape = (m, n, k)
        self.grid = (grid,)
        self.out = out
        # Two fp32 tiles a stream-K tile (head and tail parts): 256 KB each at 128x256, 52 MB at 8192^3.
        self.parts = torch.empty((max(self.sk_tiles, 1) * 2, tile.block_m * tile.block_n), dtype=torch.float32,
                                 device=x.device)  # fmt: skip
        self.counts = torch.zeros(max(self.sk_tiles, 1), dtype=torch.int32, device=x.device)
        self.meta = {
            "BLOCK_M": tile.block_m,
            "BLOCK_N": tile.block_n,
            "BLOCK_K": tile.block_k,
            "GROUP_M": tile.group_m,
            "SPLIT_STORE": split_store,
            "UPCAST": upcast,
            "num_warps": tile.warps,
            "num_stages": tile.stages,
        }

    def __call__(self) -> torch.Tensor:
        m, n, k = self.shape
        _gemm_gelu_streamk_kernel[self.grid](*self.args, self.parts, self.counts, m, n, k, self.dp_tiles, **self.meta)
        return self.out
