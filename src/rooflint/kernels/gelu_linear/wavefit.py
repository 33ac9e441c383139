"""Y = GELU_tanh(X W^T + b) as a persistent TMA GEMM whose tile shape comes from the GPU's SM count.

gelu_linear's `triton` variant autotunes between two fixed tiles. At GPT-2's MLP shape
(1024x768 -> 3072) both leave the SMs unevenly loaded: 192 tiles of 128x128 on 132 SMs is 1.45
waves, so 60 SMs run two tiles while 72 run one, and with only 12 K-steps per tile the pipeline
fill and the epilogue are not hidden either. Here the tile is chosen at call time from the GPU's
own multiprocessor count: the largest tile of the table whose tile count fills the SMs' last wave
to at least MIN_WAVE_FILL. On 132 SMs GPT-2 takes 128x192 tiles: 8 x 16 = 128 tiles, one wave on
97% of the SMs, with the 8-warp tile's efficiency kept (smaller tiles also fill the waves, but each
K step then feeds fewer MMAs per X and W load). 8192^3 keeps 128x256 (2048 tiles, 15.5 waves). A
GPU with another SM count gets another choice from the same rule.

A 192-wide tile is not a power of two, which Triton's blocks must be: it is a 128-wide and a
64-wide block side by side, two accumulators fed by the same X tile each K step.

With one tile per program (GPT-2's single wave), the bias is loaded before the K loop: loaded in the
epilogue, its L2 round trip is exposed twice (once per block). Where the tile loop is flattened into
the K loop (8192^3) an early load is no longer pipelined, so it is taken only where the loops stay
nested.

Not taken (docs/perf-notes has the measurements): Triton's warp-specialized producer warp, 32-wide K
steps in six or eight stages, a 128-wide K step, cutting the part-empty last wave's tiles along K
(the fp32 partials' round trip and the fix-up cost more than the rebalance), and stream-K over
8192^3's last waves.

TMA (host tensor descriptors) needs sm_90 or newer; the variant is skipped elsewhere with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import interpreting, tl, triton, use_device_scratch
from rooflint.kernels import sm_count
from rooflint.kernels.common.tile_order import tile_origin
from rooflint.kernels.gelu_linear import FAMILY, FLOAT_DTYPES
from rooflint.kernels.gelu_linear.tiles import INTERPRETER_SMS, dot_wt, gelu_store, load_bias


@dataclass(frozen=True)
class GemmTile:
    block_m: int
    block_n: int
    block_k: int
    stages: int
    warps: int
    group_m: int  # tile rows swept per W panel (L2 reuse of the panel)
    blocks_per_sm: int  # resident blocks an SM holds (from registers and shared memory): sets the grid
    # Warp-specialized K loop: Triton gives the TMA loads a producer warp of their own. The kernel then
    # builds its descriptors itself, as the warp-specialized attention must (attention/hopper.py).
    warp_specialize: bool = False
    # ptxas's register budget a thread (Triton's maxnreg; None: ptxas's own choice).
    max_registers: int | None = None
    # Odd waves walk K from its end: they start on the slabs the wave before read last, which are
    # still in L2 when the two waves share a panel (GROUP_M keeps a wave's successor on its X rows).
    reverse_odd_waves: bool = False

    @property
    def label(self) -> str:
        return (
            f"{self.block_m}x{self.block_n}x{self.block_k} s{self.stages} w{self.warps} "
            f"g{self.group_m} {self.blocks_per_sm}/SM"
            + " ws" * self.warp_specialize
            + (f" r{self.max_registers}" if self.max_registers else "")
            + " rev" * self.reverse_odd_waves
        )

    def tiles(self, m: int, n: int) -> int:
        return math.ceil(m / self.block_m) * math.ceil(n / self.block_n)

    @property
    def n_blocks(self) -> tuple[int, int]:
        """The tile's width as Triton blocks (powers of two): (head, tail), tail 0 when it is one block."""
        head = 1 << (self.block_n.bit_length() - 1)
        return head, self.block_n - head


# ---------------------------------------------------------------------------------------------
# TILE TABLE (docs/perf-notes has the sweep behind each row).
# Largest tile first: choose_tile() takes the first whose tiles fill the SMs' last wave to at least
# MIN_WAVE_FILL, else the fullest. blocks_per_sm is what fits an SM's 64K registers and 228 KB of
# shared memory (1 KB of it reserved per block), from compiling each tile for sm_90a
# (bf16; registers per thread, shared bytes per block):
TILES: tuple[GemmTile, ...] = (
    # 164 regs, 180,760 B: one block. 3 stages, not 4 (229,920 B): 8192^3 runs at the power cap, where
    # the time follows energy per call, and a 4th stage costs energy without hiding more latency.
    # Capped at 168 registers (ptxas's own choice: 164), which also keeps the schedule ptxas picks at
    # that budget. Odd waves walk K backwards: each wave shares its X panel with the one before,
    # whose last slabs are still in L2, so fewer DRAM reads, and at the power cap saved energy is clock.
    GemmTile(128, 256, 64, 3, 8, 16, 1, max_registers=168, reverse_odd_waves=True),
    # A 128- and a 64-wide block, 182 regs, 180,288 B: one block. GPT-2: 128 tiles, one wave on
    # 132 SMs. 4 stages: with only 12 K steps a tile, the deeper ring hides the pipeline fill.
    GemmTile(128, 192, 64, 4, 8, 8, 1),
    # 128 regs, 114,712 B: two blocks, so one's epilogue and pipeline fill overlap the other's MMAs.
    GemmTile(128, 128, 64, 3, 8, 8, 2),
    # One warpgroup a block, 96 regs, 65,552 B / 57,616 B: three blocks.
    GemmTile(128, 64, 64, 2, 4, 8, 3),
    GemmTile(64, 128, 64, 2, 4, 8, 3),
)
MIN_WAVE_FILL = 0.85
# What the sweep times at both gelu_linear shapes (at most 6): the table and the 192-wide tile with
# one stage less (139,320 B).
SWEEP_CANDIDATES: tuple[GemmTile, ...] = TILES + (GemmTile(128, 192, 64, 3, 8, 8, 1),)
# Under TRITON_INTERPRET=1 every program runs in numpy: small tiles keep the CPU tests fast.
INTERPRETER_TILE = GemmTile(32, 32, 32, 1, 4, 4, 1)
# ---------------------------------------------------------------------------------------------


def wave_fill(tiles: int, sm_count: int) -> float:
    """The fraction of SM-slots busy over the waves the tiles need: 192 tiles on 132 SMs = 0.73."""
    return tiles / (math.ceil(tiles / sm_count) * sm_count)


def choose_tile(m: int, n: int, sm_count: int, table: tuple[GemmTile, ...] = TILES) -> GemmTile:
    """The largest tile of ``table`` whose tile count keeps the SMs' last wave at least
    MIN_WAVE_FILL full; if none does, the one that fills it most (the larger on a tie)."""
    best = table[0]
    for tile in table:
        fill = wave_fill(tile.tiles(m, n), sm_count)
        if fill >= MIN_WAVE_FILL:
            return tile
        if fill > wave_fill(best.tiles(m, n), sm_count):
            best = tile
    return best


@triton.jit
def _gemm_program(
    x_desc, w_desc, w2_desc, y_desc, y2_desc, b_ptr, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_N2: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, SPLIT_STORE: tl.constexpr, UPCAST: tl.constexpr, FLATTEN: tl.constexpr,
    EARLY_BIAS: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, REVERSE_ODD_WAVES: tl.constexpr,
):  # fmt: skip
    # Each program strides over the tiles (FLATTEN: the tile loop flattened into the K loop, so the
    # software pipeliner issues the next tile's TMA loads while this tile's epilogue runs). A tile is
    # BLOCK_N columns, plus BLOCK_N2 more beside them when its width is not a power of two.
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N + BLOCK_N2)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0), flatten=FLATTEN):
        off_m, off_n = tile_origin(tile, tiles_m, tiles_n, BLOCK_M, BLOCK_N + BLOCK_N2, GROUP_M)
        if EARLY_BIAS:
            # The bias is loaded before the K loop, so its L2 round trip hides under the MMAs: with
            # one tile per SM (GPT-2's one wave) nothing else covers the epilogue's latency.
            bias = load_bias(b_ptr, off_n, N, BLOCK_N)
            if BLOCK_N2 > 0:
                bias2 = load_bias(b_ptr, off_n + BLOCK_N, N, BLOCK_N2)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if BLOCK_N2 > 0:
            acc2 = tl.zeros((BLOCK_M, BLOCK_N2), dtype=tl.float32)
        if REVERSE_ODD_WAVES:
            # The programs run their tiles in step: a program's n-th tile is in the grid's n-th wave.
            odd_wave = (tile // tl.num_programs(0)) % 2 == 1
        for kt in tl.range(k_tiles, warp_specialize=WARP_SPECIALIZE):
            k = kt * BLOCK_K
            if REVERSE_ODD_WAVES:
                k = tl.where(odd_wave, (k_tiles - 1 - kt) * BLOCK_K, k)
            # TMA zero-fills reads past M, N or K: edge tiles need no masks.
            a = x_desc.load([off_m, k])
            b = w_desc.load([off_n, k])
            acc = dot_wt(a, b, acc, UPCAST)
            if BLOCK_N2 > 0:
                b2 = w2_desc.load([off_n + BLOCK_N, k])  # the same X tile feeds both
                acc2 = dot_wt(a, b2, acc2, UPCAST)
        if not EARLY_BIAS:
            bias = load_bias(b_ptr, off_n, N, BLOCK_N)
            if BLOCK_N2 > 0:
                bias2 = load_bias(b_ptr, off_n + BLOCK_N, N, BLOCK_N2)
        gelu_store(acc, bias, off_m, off_n, y_desc, BLOCK_M, BLOCK_N, SPLIT_STORE, not UPCAST)
        if BLOCK_N2 > 0:
            gelu_store(acc2, bias2, off_m, off_n + BLOCK_N, y2_desc, BLOCK_M, BLOCK_N2, False, not UPCAST)


@triton.jit
def _gemm_gelu_kernel(
    x_desc, w_desc, w2_desc, y_desc, y2_desc, b_ptr, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_N2: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, SPLIT_STORE: tl.constexpr, UPCAST: tl.constexpr, FLATTEN: tl.constexpr,
    EARLY_BIAS: tl.constexpr, REVERSE_ODD_WAVES: tl.constexpr,
):  # fmt: skip
    _gemm_program(
        x_desc, w_desc, w2_desc, y_desc, y2_desc, b_ptr, M, N, K,
        BLOCK_M, BLOCK_N, BLOCK_N2, BLOCK_K, GROUP_M, SPLIT_STORE, UPCAST, FLATTEN, EARLY_BIAS, False,
        REVERSE_ODD_WAVES,
    )  # fmt: skip


@triton.jit
def _gemm_gelu_kernel_ws(
    x_ptr, w_ptr, y_ptr, b_ptr, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_N2: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, SPLIT_STORE: tl.constexpr, UPCAST: tl.constexpr, FLATTEN: tl.constexpr,
    EARLY_BIAS: tl.constexpr, REVERSE_ODD_WAVES: tl.constexpr,
):  # fmt: skip
    # Warp-specialized: the descriptors are made here, in global scratch (triton.set_allocator).
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    if SPLIT_STORE:
        y_desc = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N // 2])
    else:
        y_desc = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    if BLOCK_N2 > 0:
        w2_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N2, BLOCK_K])
        y2_desc = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N2])
    else:
        w2_desc, y2_desc = w_desc, y_desc
    _gemm_program(
        x_desc, w_desc, w2_desc, y_desc, y2_desc, b_ptr, M, N, K,
        BLOCK_M, BLOCK_N, BLOCK_N2, BLOCK_K, GROUP_M, SPLIT_STORE, UPCAST, FLATTEN, EARLY_BIAS, True,
        REVERSE_ODD_WAVES,
    )  # fmt: skip


def prepare(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor | None = None,
    tile: GemmTile | None = None,
    early_bias: bool | None = None,
) -> Callable[[], torch.Tensor]:
    """Build the descriptors once (a warp-specialized tile builds its own) and return the launch:
    ``prepare(x, w, b)()`` -> Y [M, N].

    x [M, K], w [N, K], b [N], fp16 or bf16, contiguous; K and N multiples of 8 (16-byte TMA rows).
    ``tile`` None: interpreter tile on CPU, else choose_tile() from this GPU's SM count.
    ``early_bias``: load each tile's bias before its K loop (None: where that loop is not flattened
    into the tile loop; in a flattened one it cost 25% at 8192^3, its loads no longer pipelined).
    """
    from triton.tools.tensor_descriptor import TensorDescriptor

    m, k = x.shape
    n = w.shape[0]
    if k % 8 or n % 8:
        raise VariantSkipped("TMA needs 16-byte row strides: K and N multiples of 8")
    if x.dtype not in (torch.float16, torch.bfloat16):
        raise VariantSkipped(f"the GEMM takes fp16 or bf16, not {x.dtype}")
    x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
    sms = sm_count(x.device, INTERPRETER_SMS)
    if tile is None:
        tile = INTERPRETER_TILE if interpreting() else choose_tile(m, n, sms)
    out = torch.empty((m, n), dtype=x.dtype, device=x.device) if out is None else out
    head, tail = tile.n_blocks
    split_store = head >= 128
    flatten = tail == 0 and not tile.warp_specialize
    # As many programs as blocks fit at once (never more than tiles): all resident, each striding.
    grid = (min(tile.tiles(m, n), sms * tile.blocks_per_sm),)
    meta = {
        "BLOCK_M": tile.block_m,
        "BLOCK_N": head,
        "BLOCK_N2": tail,
        "BLOCK_K": tile.block_k,
        "GROUP_M": tile.group_m,
        # Flattening the tile loop into the K loop lets the next tile's loads overlap this one's
        # epilogue; with two accumulators ptxas then serializes the wgmmas (C7515: the next tile's
        # zeroing lands inside their pipeline stage), so a two-block tile keeps the loops nested, as
        # a warp-specialized K loop does.
        "FLATTEN": flatten,
        "SPLIT_STORE": split_store,
        "UPCAST": interpreting(),
        "EARLY_BIAS": not flatten if early_bias is None else early_bias,
        "REVERSE_ODD_WAVES": tile.reverse_odd_waves,
        "num_warps": tile.warps,
        "num_stages": tile.stages,
    }
    if tile.max_registers and not interpreting():
        meta["maxnreg"] = tile.max_registers
    if tile.warp_specialize:
        use_device_scratch()

        def run() -> torch.Tensor:
            _gemm_gelu_kernel_ws[grid](x, w, out, b, m, n, k, **meta)
            return out

    else:
        x_desc = TensorDescriptor.from_tensor(x, [tile.block_m, tile.block_k])
        w_desc = TensorDescriptor.from_tensor(w, [head, tile.block_k])
        y_desc = TensorDescriptor.from_tensor(out, [tile.block_m, head // 2 if split_store else head])
        # The 64-wide side block of a 192-wide tile (placeholders when the tile is one block).
        w2_desc = TensorDescriptor.from_tensor(w, [tail, tile.block_k]) if tail else w_desc
        y2_desc = TensorDescriptor.from_tensor(out, [tile.block_m, tail]) if tail else y_desc

        def run() -> torch.Tensor:
            _gemm_gelu_kernel[grid](x_desc, w_desc, w2_desc, y_desc, y2_desc, b, m, n, k, **meta)
            return out

    run.tile = tile  # the chosen tile, for notes and the sweep
    return run


def unsupported_reason(device: torch.device) -> str | None:
    """Why this kernel cannot run on ``device`` (None: it can). The CPU counts only under the interpreter."""
    if device.type != "cuda":
        return None if interpreting() else "needs a CUDA GPU (or TRITON_INTERPRET=1)"
    major, minor = torch.cuda.get_device_capability(device)
    if major < 9:
        return f"needs TMA (sm_90 or newer); this GPU is sm_{major}{minor}: the `cuda` variant runs here"
    return None


def build_variant(case) -> Callable[[], torch.Tensor]:
    """The `triton_wavefit` variant of gelu_linear: skipped before sm_90 (no TMA), with the reason."""
    reason = unsupported_reason(case.device)
    if reason:
        raise VariantSkipped(reason)
    x, w, b = case["x"], case["w"], case["b"]
    run = prepare(x, w, b, torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device))
    run.note = f"tile {run.tile.label} for {sm_count(x.device, INTERPRETER_SMS)} SMs"
    return run


# The tile shape from the GPU's SM count, so small GEMMs fill whole waves (the module docstring says how).
@FAMILY.variant("triton_wavefit", kind="triton", needs=(NEEDS_CUDA, NEEDS_TRITON), dtypes=FLOAT_DTYPES)
def triton_wavefit_variant(case):
    """sm_90+: persistent TMA GEMM, bias + GELU epilogue, tile chosen from the SM count to fill the waves"""
    return build_variant(case)
