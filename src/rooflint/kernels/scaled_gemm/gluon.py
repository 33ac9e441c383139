"""scaled_gemm with block scales on sm_90 as a warp-specialized Gluon GEMM: the `triton_gluon` variant.

Why. Per-block scales (A 1 x 128, B 128 x 128, DeepSeek-V3's) change with every 128-wide K block,
so each K block's product must leave the tensor cores' accumulator and be added to the running sum
times sa * sb (the "promotion" that also keeps fp8's limited-precision tensor-core accumulation to
one block). In the Triton kernel (triton.py) that add waits for its wgmmas to retire, and Triton's
software pipeliner meets both warpgroups at a CTA barrier every K step: the tensor cores idle through
every add and every barrier. Here the schedule is stated, as DeepGEMM's is:
- a producer warp issues the TMA loads of A (two 64-row boxes) and B (one 128-row box) into
  a STAGES-deep ring that runs on across the persistent CTA's tiles, each stage with a "full"
  mbarrier (bytes landed) and an "empty" one (one arrive per consumer);
- two consumer warpgroups, 64 rows of the tile each, never wait for each other, so one's scaled adds
  run while the other's wgmmas keep the tensor cores busy;
- a consumer's K step: the K block's product in fresh registers (64 x 128 fp32), then its add into
  the sum times sa (one a row) * sb (one a tile); the scales are loaded before the stage's bytes
  are waited for, so their L2 round trip hides;
- each consumer writes its 64 x 128 bf16 through shared memory with a TMA store, clipped at M and
  N, and waits for it only before it reuses that buffer on its next tile.

The tile is 128 x 128 x 128: one K step is one scale block. ptxas gives every thread of a 384-thread
CTA at most 168 registers, whatever setmaxnreg hands the consumers (Triton 3.6, ptxas 13), so a
consumer holds one 64 x 128 sum and one product (128 registers). A 128 x 256 tile, which reads a
third fewer L2 bytes per FLOP, needs a second sum (192) and spills; its one-product form with the
rescale folded into the tensor cores' accumulator would accumulate all of K at fp8's limited
precision, which is what per-block promotion exists to avoid. Without warp specialization (256
threads, 255 registers) the 128 x 256 tile fits, but its warpgroups meet every K step and it ran
slower (docs/perf-notes/quantized.md has the measurements).

Gluon has no CPU interpreter: tests/test_gluon_scaled_gemm.py compiles it for sm_90a on the CPU, and the
GPU tier (tests/gpu/test_gpu_scaled_gemm_gluon.py) checks it against float64 on ragged shapes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.kernels import sm_count
from rooflint.kernels.common.gluon import (  # Gluon's Hopper ops where this Triton has them
    HAS_GLUON,
    TensorDescriptor,
    fence_async_shared,
    gl,
    gluon,
    mbarrier,
    sm90_reason,
    tile_origin,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from rooflint.kernels.common.gluon import tma_load as _tma_load
from rooflint.kernels.common.gluon import tma_store as _tma_store
from rooflint.kernels.scaled_gemm import FAMILY
from rooflint.kernels.scaled_gemm.formats import SCALE_BLOCK, require_fp8_tensor_cores

HALF_M = 64  # rows a consumer warpgroup owns (one wgmma's M)
HALF_N = 128  # the tile's width, one B scale block: B's scale is one scalar a tile and K block
BLOCK_K = SCALE_BLOCK  # one K step is one scale block (128 one-byte codes: one 128-byte swizzle row)
GROUP_M = 8  # tile rows a B panel sweeps before the next (the L2 reuse of gelu_linear's GEMMs)
# Shared memory a stage: A 128x128 + B 128x128 one-byte codes (32 KB), plus the two consumers' 64x128
# bf16 output buffers (32 KB): 4 stages take 160 KB (a fifth measured no faster: docs/perf-notes/quantized.md).
STAGES = 4
CONSUMER_REGS, PRODUCER_REGS = 232, 40  # setmaxnreg: 2 x 128 x 232 + 32 x 40 (a warp) fit 64K

# What `rooflint ab --config` may set (rooflint.engine.ab.configs).
GEMM_CONFIG = {"STAGES": STAGES, "GROUP_M": GROUP_M}

# A formats (B is e4m3, or int8 with int8): wgmma multiplies any pair of e4m3 and e5m2, or int8 by int8.
_GL_CODES = {torch.float8_e4m3fn: "float8e4nv", torch.float8_e5m2: "float8e5", torch.int8: "int8"}


if HAS_GLUON:

    @gluon.jit
    def _ws_load(a_desc, b_desc, a_smem, b_smem, full, empty, M, N, K, group_m):
        # Constants come from types here: a worker partition's arguments lose their constexpr-ness.
        HALF: gl.constexpr = a_desc.block_type.shape[0]
        BK: gl.constexpr = a_desc.block_type.shape[1]
        BN: gl.constexpr = b_desc.block_type.shape[0]
        STAGES: gl.constexpr = b_smem.type.shape[0]
        tiles_m = gl.cdiv(M, 2 * HALF)
        tiles_n = gl.cdiv(N, BN)
        k_tiles = gl.cdiv(K, BK)
        step = 0  # the ring's count, running on across tiles
        for tile in range(gl.program_id(0), tiles_m * tiles_n, gl.num_programs(0)):
            tile_m, tile_n = tile_origin(tile, tiles_m, tiles_n, group_m)
            off_m = tile_m * 2 * HALF
            off_n = tile_n * BN
            for kt in range(k_tiles):
                stage = step % STAGES
                # A fresh barrier's "previous" phase (parity 1) counts as complete: the first round passes.
                mbarrier.wait(empty.index(stage), ((step // STAGES) & 1) ^ 1)
                # TMA counts a whole box's bytes even where it zero-fills past M, N or K.
                mbarrier.expect(full.index(stage), 2 * a_desc.block_type.nbytes + b_desc.block_type.nbytes)
                k = kt * BK
                _tma_load(a_desc, [off_m, k], full.index(stage), a_smem.index(2 * stage))
                _tma_load(a_desc, [off_m + HALF, k], full.index(stage), a_smem.index(2 * stage + 1))
                _tma_load(b_desc, [off_n, k], full.index(stage), b_smem.index(stage))
                step += 1

    @gluon.jit
    def _zeros_after(total, INTEGER: gl.constexpr):
        # Zeros for the product's registers (use_acc=False never reads them, but wgmma's accumulator
        # operand must be defined) that the compiler can only write after `total`, the sum the last
        # product was added into: so the moves come after that add has read the last product and
        # before the next wgmmas start, never between a wgmma's start and its wait (where ptxas would
        # serialize every wgmma of the kernel), and no copy of a product is kept alive.
        zeros = gl.inline_asm_elementwise("mov.b32 $0, 0;", "=r,r", [total], dtype=gl.float32, is_pure=True, pack=1)
        if INTEGER:  # int8 MMAs accumulate in int32: the same zero bits
            zeros = zeros.to(gl.int32, bitcast=True)
        return zeros

    @gluon.jit
    def _ws_mma(a_smem, b_smem, full, empty, c_desc, c_smem, sa_ptr, sb_ptr, M, N, K, group_m, half):
        """One warpgroup's 64 rows of each tile: the K loop with a scaled add per K block, then bf16
        stored by TMA."""
        HALF: gl.constexpr = a_smem.type.shape[1]
        BK: gl.constexpr = a_smem.type.shape[2]
        BN: gl.constexpr = b_smem.type.shape[1]
        STAGES: gl.constexpr = b_smem.type.shape[0]
        INTEGER: gl.constexpr = a_smem.dtype == gl.int8
        layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 256 // a_smem.dtype.primitive_bitwidth]
        )
        tiles_m = gl.cdiv(M, 2 * HALF)
        tiles_n = gl.cdiv(N, BN)
        k_tiles = gl.cdiv(K, BK)  # = the row length of both scale tensors: one K step is one scale block
        step = 0
        for tile in range(gl.program_id(0), tiles_m * tiles_n, gl.num_programs(0)):
            tile_m, tile_n = tile_origin(tile, tiles_m, tiles_n, group_m)
            row = tile_m * 2 * HALF + half * HALF
            rows = row + gl.arange(0, HALF, layout=gl.SliceLayout(1, layout))
            rows_ok = rows < M
            sa_rows = sa_ptr + rows * k_tiles
            sb_tile = sb_ptr + tile_n * k_tiles
            acc = gl.zeros([HALF, BN], gl.float32, layout=layout)
            for kt in range(k_tiles):
                stage = step % STAGES
                # The scales first: their L2 round trip under the wait for the stage's bytes.
                s = gl.load(sa_rows + kt, mask=rows_ok, other=0.0) * gl.load(sb_tile + kt)
                mbarrier.wait(full.index(stage), (step // STAGES) & 1)
                # The K block's product in fresh registers, its wgmmas waited for at once: the other
                # consumer's run meanwhile, and its add runs under them.
                tok = warpgroup_mma(a_smem.index(2 * stage + half), b_smem.index(stage).permute((1, 0)),
                                    _zeros_after(acc, INTEGER), use_acc=False, is_async=True)  # fmt: skip
                part = warpgroup_mma_wait(0, deps=(tok,))
                mbarrier.arrive(empty.index(stage), count=1)
                acc = acc + part.to(gl.float32) * gl.expand_dims(s, 1)
                step += 1
            # The previous tile's store from this buffer must have read it before it is rewritten.
            tma.store_wait(0)
            c_smem.store(acc.to(c_smem.dtype))
            fence_async_shared()
            _tma_store(c_desc, [row, tile_n * BN], c_smem)
        tma.store_wait(0)

    @gluon.jit
    def _block_scaled_gemm_ws(a_desc, b_desc, c_desc, sa_ptr, sb_ptr, M, N, K, group_m, STAGES: gl.constexpr,
                              CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                              num_warps: gl.constexpr):  # fmt: skip
        HALF: gl.constexpr = a_desc.block_type.shape[0]
        BK: gl.constexpr = a_desc.block_type.shape[1]
        BN: gl.constexpr = b_desc.block_type.shape[0]
        # The ring's depth travels in the buffers' shapes: a partition's constexpr arguments arrive as
        # run-time values (Triton 3.6).
        a_smem = gl.allocate_shared_memory(a_desc.dtype, [2 * STAGES, HALF, BK], a_desc.layout)
        b_smem = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BN, BK], b_desc.layout)
        c_smem = gl.allocate_shared_memory(c_desc.dtype, [2, HALF, BN], c_desc.layout)
        full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(STAGES):
            mbarrier.init(full.index(s), count=1)
            mbarrier.init(empty.index(s), count=2)  # one arrive per consumer warpgroup

        mma0 = (a_smem, b_smem, full, empty, c_desc, c_smem.index(0), sa_ptr, sb_ptr, M, N, K, group_m, 0)
        mma1 = (a_smem, b_smem, full, empty, c_desc, c_smem.index(1), sa_ptr, sb_ptr, M, N, K, group_m, 1)
        load = (a_desc, b_desc, a_smem, b_smem, full, empty, M, N, K, group_m)
        gl.warp_specialize([(_ws_mma, mma0), (_ws_mma, mma1), (_ws_load, load)], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


def why_not(a: torch.Tensor, b: torch.Tensor, scaling: str) -> str | None:
    """Why this kernel cannot take the operands and scaling (None: it can), before any GPU check."""
    if scaling != "block":
        return "the Gluon GEMM is the block-scaled path; per-tensor and per-row scales run in the triton variant"
    if a.dtype not in _GL_CODES or (b.dtype != torch.int8) != (a.dtype != torch.int8):
        return f"the Gluon GEMM multiplies fp8 by e4m3 or int8 by int8, not {a.dtype} by {b.dtype}"
    if a.dtype != torch.int8 and b.dtype != torch.float8_e4m3fn:
        return f"the Gluon GEMM's B is e4m3 with an fp8 A, not {b.dtype}"
    if a.shape[1] % 16 or b.shape[0] % 8:
        return "TMA needs 16-byte row strides: K a multiple of 16 and N of 8"
    return None


def unsupported_reason(device: torch.device) -> str | None:
    """Why the kernel cannot run on ``device`` (None: it can); why_not checks its formats."""
    return sm90_reason(device, "block-scaled GEMM", None)


def descriptors(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> tuple:
    """Host TMA descriptors: A in 64-row boxes (one per consumer), B in 128-row boxes, C in 64 x 128
    boxes. Reads past M, N or K are zero-filled, stores past them dropped."""

    def describe(t: torch.Tensor, box: list[int]):
        element = getattr(gl, _GL_CODES.get(t.dtype, "bfloat16"))
        layout = gl.NVMMASharedLayout.get_default_for(box, element)
        return TensorDescriptor(t, list(t.shape), [t.shape[1], 1], box, layout)

    return describe(a, [HALF_M, BLOCK_K]), describe(b, [HALF_N, BLOCK_K]), describe(out, [HALF_M, HALF_N])


def prepare(a, b, sa, sb, out: torch.Tensor | None = None, config: dict | None = None) -> Callable[[], torch.Tensor]:
    """The launch over a [M, K] and b [N, K] codes with block scales sa [M, cdiv(K, 128)] and sb
    [cdiv(N, 128), cdiv(K, 128)]: ``prepare(a, b, sa, sb)()`` -> bf16 C [M, N]. ``config``: GEMM_CONFIG's names."""
    settings = {**GEMM_CONFIG, **(config or {})}
    m, k = a.shape
    n = b.shape[0]
    blocks_k = -(-k // BLOCK_K)
    if tuple(sa.shape) != (m, blocks_k) or tuple(sb.shape) != (-(-n // HALF_N), blocks_k):
        raise ValueError(
            f"block scales sa {list(sa.shape)}, sb {list(sb.shape)} do not fit a {list(a.shape)}, b {list(b.shape)}"
        )
    stages, group_m = int(settings["STAGES"]), int(settings["GROUP_M"])
    if not 1 <= stages <= 5 or group_m < 1:
        raise ValueError(f"STAGES={stages} (1 to 5: shared memory) and GROUP_M={group_m} (at least 1)")
    out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device) if out is None else out
    descs = descriptors(a.contiguous(), b.contiguous(), out)
    sa, sb = sa.contiguous(), sb.contiguous()
    tiles = -(-m // (2 * HALF_M)) * -(-n // HALF_N)
    grid = (min(tiles, sm_count(a.device, 1)),)

    def run() -> torch.Tensor:
        _block_scaled_gemm_ws[grid](*descs, sa, sb, m, n, k, group_m, stages, CONSUMER_REGS, PRODUCER_REGS,
                                    num_warps=4)  # fmt: skip
        return out

    return run


@FAMILY.variant(
    "triton_gluon", kind="triton", needs=(NEEDS_CUDA, NEEDS_TRITON), dtypes=("fp8_e4m3", "fp8_e5m2", "int8")
)
def triton_gluon_variant(case, config=GEMM_CONFIG):
    """sm_90 block scales: Gluon GEMM, TMA producer + 2 consumer warpgroups, K-block adds under the other's wgmmas"""
    a, b = case["a"], case["b"]
    reason = why_not(a, b, case.params["scaling"]) or unsupported_reason(case.device)
    if reason:
        raise VariantSkipped(reason)
    if a.dtype != torch.int8:
        require_fp8_tensor_cores(a.device)
    out = torch.empty((a.shape[0], b.shape[0]), dtype=torch.bfloat16, device=a.device)
    return prepare(a, b, case["sa"], case["sb"], out, config)
