"""The part-empty last wave of the wave-fitted persistent GEMM, cut along K (split-K), as a launch of
its own right behind the data-parallel one.

Why. 8192^3 in 128x256 tiles is 2048 tiles on 132 SMs: 15 whole waves and 68 tiles. Under ncu every
8192^3 GEMM here, cuBLASLt's included, keeps its tensor pipe busy 95-96% of the cycles an SM is
active; what is left is the SMs' idle time: for the 16th tile 64 SMs wait (0.96 of the elapsed
cycles active). Here the whole waves stay data-parallel (_gemm_small's kernel over the first 1980
tiles); the 68 tiles are each cut in SPLIT parts along K, 68 x 3 = 204 parts on 132 programs, so
the tail takes two thirds of a tile's time rather than a whole one.

Why a second launch. Inside the data-parallel kernel the tail's code (its own K loop, the fix-up)
took ptxas to 192 registers and slowed the data-parallel loop by 0.5% at whole waves: the gain was
gone (reports/h100/probe-round19). As its own launch the data-parallel kernel keeps its code, and
programmatic dependent launch (PDL) hides the launch gap: the first kernel lets the tail in at its
start, as the tail reads nothing the first kernel writes, so each tail block takes an SM the
moment a data-parallel program leaves it. A plain second launch lost its gain to the gap.

Why not stream-K (round 15, 9f0c44b: 3.5% slower). There every program's share of the last waves
began at its own K offset and the fix-up added a whole fp32 partial tile into the live 128x256
accumulator. Here part s of every tile covers the same K range, the parts of a range run side by
side as the data-parallel waves do, and the fix-up runs after the accumulator is stored.

The fix-up. Every part writes its fp32 partial tile to its own slot of a workspace, then counts
itself in on the tile's counter; the last to arrive sums the tile's slots in the order 0..SPLIT-1,
so the result is the same bits whichever part arrives last, half a tile at a time (64 registers a
thread), and runs the bias + GELU epilogue. Nobody waits on anybody: no spinning, and the CPU
interpreter, which runs the programs one after another, runs the same code. The finisher sets the
counter back to zero, so the next launch (or a CUDA graph replay) needs no memset.

Cost per cut tile: SPLIT fp32 partials of 128 KB through L2 (written, then read by the finisher), a
pipeline fill per part, and the workspace: 26.7 MB at 8192^3.
"""

from __future__ import annotations

import math

import torch

from rooflint.core.triton_compat import gdc_launch_dependents, interpreting, tl, triton
from rooflint.kernels.gelu_linear import _dot_wt, _gelu_store, _load_bias, _tile_origin

# At least this many K steps in a part: below it the partials' round trip and the part's pipeline
# fill weigh too much (GPT-2's K = 768 is 12 steps of 64; splitting its tail wave lost 9% there).
MIN_PART_K_STEPS = 32
SPLITS = (2, 3, 4)
# Take a split only where it shortens the tail by at least this fraction of a tile's time: the
# partials' round trip and the extra pipeline fills are what the rest must pay for.
MIN_GAIN = 0.2


def plan(tiles: int, programs: int, k_steps: int) -> tuple[int, int]:
    """(data-parallel tiles, split) for ``tiles`` tiles of ``k_steps`` K steps on ``programs``
    resident programs. The whole waves stay data-parallel; the part-empty last wave's tiles are cut
    in ``split`` parts along K when that shortens it (split 1: no cut). 2048 tiles on 132 programs
    with 128 steps: 15 waves + 68 tiles, cut in 3: 204 parts, at most 2 a program, 2/3 of a tile."""
    rest = tiles % programs
    if tiles <= programs or rest == 0:
        return tiles, 1
    best, best_time = 1, 1.0  # the tail's time in tiles' time: one whole tile uncut
    for split in SPLITS:
        if k_steps // split < MIN_PART_K_STEPS:
            break
        time = math.ceil(rest * split / programs) / split
        if time < best_time:
            best, best_time = split, time
    if best_time > 1.0 - MIN_GAIN:
        return tiles, 1
    return tiles - rest, best


@triton.jit
def split_tail(
    x_desc, w_desc, y_desc, b_ptr, part_ptr, count_ptr, N, tiles_m, tiles_n, k_tiles, DP_TILES,
    SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, SPLIT_STORE: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """The tiles from DP_TILES on, each cut in SPLIT parts along K, dealt out to the programs."""
    tail_tiles = tiles_m * tiles_n - DP_TILES
    # The finisher sums and stores half a tile at a time where the output leaves in two
    # half-width TMA stores (y_desc's block), a whole one otherwise.
    HALVES: tl.constexpr = 2 if SPLIT_STORE else 1
    WIDTH: tl.constexpr = BLOCK_N // HALVES
    TILE: tl.constexpr = BLOCK_M * BLOCK_N
    rows = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N
    tile_offsets = rows + tl.arange(0, BLOCK_N)[None, :]  # a slot: one row-major fp32 tile
    part_offsets = rows + tl.arange(0, WIDTH)[None, :]
    # Part-major order: part s of every tail tile before part s + 1 of any, so the programs run the
    # same K range side by side and share its X and W slabs in L2.
    for part in tl.range(tl.program_id(0), tail_tiles * SPLIT, tl.num_programs(0)):
        s = part // tail_tiles
        t = part - s * tail_tiles
        off_m, off_n = _tile_origin(DP_TILES + t, tiles_m, tiles_n, BLOCK_M, BLOCK_N, GROUP_M)
        k0 = s * k_tiles // SPLIT
        k1 = (s + 1) * k_tiles // SPLIT
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in tl.range(k0, k1):
            a = x_desc.load([off_m, kt * BLOCK_K])
            b = w_desc.load([off_n, kt * BLOCK_K])
            acc = _dot_wt(a, b, acc, UPCAST)
        tl.store(part_ptr + (t * SPLIT + s) * TILE + tile_offsets, acc)
        # All the block's threads have stored before one thread counts the part in: its acq_rel
        # atomic publishes their stores (CUTLASS's semaphore: __syncthreads, then a release by one
        # thread) and, for the last to arrive, orders the loads below after it.
        tl.debug_barrier()
        arrived = tl.atomic_add(count_ptr + t, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT - 1:
            for h in tl.static_range(HALVES):
                total = tl.zeros((BLOCK_M, WIDTH), dtype=tl.float32)
                for p in tl.static_range(SPLIT):
                    # .cg: from L2, where the other SMs' stores are, never a stale L1 line.
                    total += tl.load(part_ptr + (t * SPLIT + p) * TILE + h * WIDTH + part_offsets, cache_modifier=".cg")
                bias = _load_bias(b_ptr, off_n + h * WIDTH, N, WIDTH)
                _gelu_store(total, bias, off_m, off_n + h * WIDTH, y_desc, BLOCK_M, WIDTH, False, not UPCAST)
            tl.atomic_xchg(count_ptr + t, 0, sem="relaxed", scope="gpu")  # ready for the next launch


@triton.jit
def _split_tail_kernel(
    x_desc, w_desc, y_desc, b_ptr, part_ptr, count_ptr, M, N, K, DP_TILES,
    SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, SPLIT_STORE: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    split_tail(
        x_desc, w_desc, y_desc, b_ptr, part_ptr, count_ptr, N, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N),
        tl.cdiv(K, BLOCK_K), DP_TILES, SPLIT, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, SPLIT_STORE, UPCAST,
    )  # fmt: skip


def pdl_available(device: torch.device) -> bool:
    """PDL needs sm_90+ and Triton's griddepcontrol; the CPU interpreter has neither."""
    if device.type != "cuda" or interpreting() or gdc_launch_dependents is None:
        return False
    return torch.cuda.get_device_capability(device)[0] >= 9


def prepare_tail(x, descriptors, b, shape, tile, dp_tiles: int, split: int, programs: int, meta: dict):
    """The tail's launch: the tiles past ``dp_tiles`` cut in ``split`` parts. ``descriptors`` are the
    data-parallel kernel's (x, w, y) and ``meta`` its launch parameters. The workspace is made here,
    once, its counters zeroed (each launch leaves them zeroed). The launch's ``pdl`` says whether it
    follows the data-parallel kernel with PDL (that kernel must then let it in)."""
    m, n, k = shape
    tail_tiles = tile.tiles(m, n) - dp_tiles
    parts = torch.empty(tail_tiles * split * tile.block_m * tile.block_n, dtype=torch.float32, device=x.device)
    counts = torch.zeros(tail_tiles, dtype=torch.int32, device=x.device)
    pdl = pdl_available(x.device) and dp_tiles > 0
    tail_meta = {key: meta[key] for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_STORE", "UPCAST",
                                            "num_warps", "num_stages")}  # fmt: skip
    tail_meta["SPLIT"] = split
    if pdl:
        tail_meta["launch_pdl"] = True
    grid = (min(tail_tiles * split, programs),)

    def launch() -> None:
        _split_tail_kernel[grid](*descriptors, b, parts, counts, m, n, k, dp_tiles, **tail_meta)

    launch.pdl = pdl
    return launch
