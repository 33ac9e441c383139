"""Y = GELU_tanh(X W^T + b) on sm_90 as a warp-specialized Gluon GEMM: gelu_linear's `triton_gluon`.

Why. At GPT-2's MLP shape (1024x768 -> 3072) the wave-fitted Triton GEMM (wavefit.py) runs one
128x192 tile per SM, 12 K steps each; what is left of its time is its warps' stalls at the software
pipeliner's CTA barrier: each K step, both warpgroups meet before a stage is refilled. Triton's own
warp specialization does not remove that barrier. In Gluon the schedule is stated, as cuBLAS's and
FlashAttention-3's:
- a producer warp issues the TMA loads of X and W into a STAGES-deep ring, each stage with a "full"
  mbarrier (bytes landed) and an "empty" one (count 2: one arrive per consumer);
- two consumer warpgroups, 64 rows of the tile each, never wait for each other: a consumer waits only
  for its stage's bytes, keeps one K step's wgmmas in flight and releases the stage before;
- each consumer loads its bias before the K loop (its L2 round trip under the first bytes' wait),
  starts its accumulators at it, and stores its 64 x 192 GELU through shared memory with TMA
  stores, clipped at M and N by the descriptor.

The tile is a 128-wide and a 64-wide wgmma side by side (192 columns: 8 x 16 = 128 tiles on 132 SMs
at GPT-2's shape, wavefit.py's reasoning); a CTA takes one tile (the grid is the tile count).

A traced launch (`prepare`'s `trace`) shows where the time goes: the K loop runs at the tensor
cores' rate, and the epilogue, which nothing overlaps at one tile per SM, is the rest; so the
accumulators start at the bias (an add an element less in the epilogue). At 8192^3 one tile per CTA
leaves each epilogue exposed, which is why the persistent kernels win there (docs/perf-notes).

Gluon has no CPU interpreter: tests/test_gluon_gemm.py compiles it for sm_90a on the CPU, and the GPU
tier (tests/gpu/test_gpu_gemm_gluon.py) checks it against float64 on ragged shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.kernels.common.gelu_tanh import GELU_K0, GELU_K1
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
from rooflint.kernels.gelu_linear import FAMILY, FLOAT_DTYPES

HALF_M = 64  # rows a consumer warpgroup owns (one wgmma's M)
BLOCK_N, BLOCK_N2 = 128, 64  # the tile's two wgmma widths: 192 columns
BLOCK_K = 64  # 128 bytes of bf16: one 128-byte swizzle row
# Shared memory: STAGES x (X 128x64 + W 192x64) x 2 bytes = 40 KB a stage, plus the two consumers'
# 64x192 output tiles (48 KB): 4 stages take 208 KB of the SM's 227.
STAGES = 4
# Each consumer stores its 64-wide part by TMA before computing its 128-wide part's GELU (_ws_mma).
OVERLAP_STORE = True
# A traced launch (prepare's `trace`) records TRACE_SLOTS int64 stamps a CTA: %globaltimer (ns, one clock for
# the GPU) at consumer 0's start and after consumer 1's stores; then %clock64 (cycles, one counter an SM, so
# comparable within a CTA) at consumer 0's start, the producer's start and its last load issued, each
# consumer's last wgmma retired, its TMA stores issued and its stores done, and when each of the first
# TRACE_STEPS K steps' bytes had landed.
TRACE_FIELDS = ("ns_start", "ns_end", "start", "producer_start", "producer_done", "mma_done", "stores_issued",
                "stores_done", "c1_mma_done", "c1_stores_issued", "c1_stores_done")  # fmt: skip
TRACE_STEPS = 24
TRACE_SLOTS = len(TRACE_FIELDS) + TRACE_STEPS


if HAS_GLUON:

    @gluon.jit
    def _gelu_tanh(z):
        # tanh.approx: one MUFU op an element (kernels/common/gelu_tanh.py's one-MUFU form and constants; 16-bit
        # outputs only). A Gluon kernel cannot call that @triton.jit function, so the form is here.
        u = z * (GELU_K0 + GELU_K1 * z * z)
        t = gl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [u], dtype=gl.float32, is_pure=True, pack=1)
        half = 0.5 * z
        return half + half * t

    _SLOTS = gl.constexpr(TRACE_SLOTS)  # a kernel reads module constants only as constexpr
    _STEPS = gl.constexpr(TRACE_STEPS)
    _FIELDS = gl.constexpr(len(TRACE_FIELDS))

    @gluon.jit
    def _clock(dummy):
        # One read of the SM's %clock64 per element of `dummy` (not pure: never hoisted or merged).
        return gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [dummy], dtype=gl.int64, is_pure=False,
                                         pack=1)  # fmt: skip

    @gluon.jit
    def _globaltimer(dummy):
        # The GPU's nanosecond timer, one clock for all SMs.
        return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [dummy], dtype=gl.int64,
                                         is_pure=False, pack=1)  # fmt: skip

    @gluon.constexpr_function
    def _traced(trace):
        # Whether the launch traces, from the pointer's type: a partition's arguments are run-time
        # values, so a flag would compile the stamps into every launch. Untraced launches pass an int8
        # placeholder that nothing writes.
        return trace.dtype.element_ty == gl.int64

    @gluon.jit
    def _record(trace, slot, value, lanes):
        # Lane 0 writes this CTA's stamp `slot`; the other lanes hold the same value.
        gl.store(trace + gl.program_id(0) * _SLOTS + slot + lanes * 0, value, mask=lanes == 0)

    @gluon.jit
    def _ws_load(x_desc, w_desc, w2_desc, x_smem, w_smem, w2_smem, full, empty, off_m, off_n, k_tiles, trace):
        # Constants come from types here: a worker partition's arguments lose their constexpr-ness.
        HALF: gl.constexpr = x_desc.block_type.shape[0]
        BK: gl.constexpr = x_desc.block_type.shape[1]
        BN: gl.constexpr = w_desc.block_type.shape[0]
        STAGES: gl.constexpr = w_smem.type.shape[0]
        lanes = gl.arange(0, 32, layout=gl.BlockedLayout([1], [32], [1], [0]))
        traced: gl.constexpr = _traced(trace)
        if traced:
            _record(trace, 3, _clock(lanes), lanes)
        for kt in range(k_tiles):
            stage = kt % STAGES
            # A fresh barrier's "previous" phase (parity 1) counts as complete: the first round passes.
            mbarrier.wait(empty.index(stage), ((kt // STAGES) & 1) ^ 1)
            # TMA counts a whole box's bytes even where it zero-fills past M, N or K.
            mbarrier.expect(
                full.index(stage), 2 * x_desc.block_type.nbytes + w_desc.block_type.nbytes + w2_desc.block_type.nbytes
            )
            k = kt * BK
            _tma_load(x_desc, [off_m, k], full.index(stage), x_smem.index(2 * stage))
            _tma_load(x_desc, [off_m + HALF, k], full.index(stage), x_smem.index(2 * stage + 1))
            _tma_load(w_desc, [off_n, k], full.index(stage), w_smem.index(stage))
            _tma_load(w2_desc, [off_n + BN, k], full.index(stage), w2_smem.index(stage))
        if traced:
            _record(trace, 4, _clock(lanes), lanes)

    @gluon.jit
    def _ws_mma(x_smem, w_smem, w2_smem, full, empty, y_desc, y2_desc, y_smem, y2_smem, b_ptr, N, off_m, off_n,
                k_tiles, half, overlap_store, trace):  # fmt: skip
        """One warpgroup's 64 rows of the tile: the K loop from the bias, then GELU stored by TMA."""
        HALF: gl.constexpr = x_smem.type.shape[1]
        BN: gl.constexpr = w_smem.type.shape[1]
        BN2: gl.constexpr = w2_smem.type.shape[1]
        STAGES: gl.constexpr = w_smem.type.shape[0]
        layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
        layout2: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN2, 16]
        )
        # Stamps are written by thread 0 of one consumer: the other's lanes are numbered past it.
        lanes = gl.arange(0, 128, layout=gl.BlockedLayout([1], [32], [4], [0]))
        first, second = lanes + half * 128, lanes + (1 - half) * 128
        traced: gl.constexpr = _traced(trace)
        if traced:
            _record(trace, 0, _globaltimer(first), first)
            _record(trace, 2, _clock(first), first)
        cols = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
        cols2 = off_n + BN + gl.arange(0, BN2, layout=gl.SliceLayout(0, layout2))
        bias = gl.load(b_ptr + cols, mask=cols < N, other=0.0).to(gl.float32)
        bias2 = gl.load(b_ptr + cols2, mask=cols2 < N, other=0.0).to(gl.float32)
        # The accumulators start at the bias: the epilogue, which nothing overlaps at one tile per SM,
        # is then one add (and a bf16 unpack) an element shorter (GELU is 6 FP32/MUFU ops an element).
        acc = gl.zeros([HALF, BN], gl.float32, layout=layout) + gl.expand_dims(bias, 0)
        acc2 = gl.zeros([HALF, BN2], gl.float32, layout=layout2) + gl.expand_dims(bias2, 0)
        for kt in range(k_tiles):
            stage = kt % STAGES
            mbarrier.wait(full.index(stage), (kt // STAGES) & 1)
            if traced:  # the first _STEPS steps (later ones renumber the lanes: nobody writes)
                _record(trace, _FIELDS + kt, _clock(first), first + (kt >= _STEPS).to(gl.int32))
            a = x_smem.index(2 * stage + half)
            acc = warpgroup_mma(a, w_smem.index(stage).permute((1, 0)), acc, is_async=True)
            acc2 = warpgroup_mma(a, w2_smem.index(stage).permute((1, 0)), acc2, is_async=True)
            # At most this step's two wgmmas in flight: the step before is done with its stage.
            acc, acc2 = warpgroup_mma_wait(2, deps=(acc, acc2))
            if kt > 0:
                mbarrier.arrive(empty.index((kt - 1) % STAGES), count=1)
        acc, acc2 = warpgroup_mma_wait(0, deps=(acc, acc2))
        if traced:
            _record(trace, 5, _clock(first), first)
            _record(trace, 8, _clock(second), second)
        # (The last stage is never released: no load follows it.)
        row = off_m + half * HALF
        if overlap_store:
            # The 64-wide part first: its TMA store runs while the 128-wide part's GELU (two thirds of
            # the epilogue's MUFU work, ~1,000 cycles an SM) is computed, instead of after it.
            y2_smem.store(_gelu_tanh(acc2).to(y2_smem.dtype))
            fence_async_shared()
            _tma_store(y2_desc, [row, off_n + BN], y2_smem)
            y_smem.store(_gelu_tanh(acc).to(y_smem.dtype))
            fence_async_shared()
            _tma_store(y_desc, [row, off_n], y_smem)
        else:
            y_smem.store(_gelu_tanh(acc).to(y_smem.dtype))
            y2_smem.store(_gelu_tanh(acc2).to(y2_smem.dtype))
            fence_async_shared()
            _tma_store(y_desc, [row, off_n], y_smem)
            _tma_store(y2_desc, [row, off_n + BN], y2_smem)
        if traced:
            _record(trace, 6, _clock(first), first)
            _record(trace, 9, _clock(second), second)
        tma.store_wait(0)
        if traced:
            _record(trace, 7, _clock(first), first)
            _record(trace, 10, _clock(second), second)
            _record(trace, 1, _globaltimer(second), second)

    @gluon.jit
    def _gemm_gelu_ws(x_desc, w_desc, w2_desc, y_desc, y2_desc, b_ptr, M, N, K, trace, STAGES: gl.constexpr,
                      OVERLAP_STORE: gl.constexpr, num_warps: gl.constexpr):  # fmt: skip
        HALF: gl.constexpr = x_desc.block_type.shape[0]
        BK: gl.constexpr = x_desc.block_type.shape[1]
        BN: gl.constexpr = w_desc.block_type.shape[0]
        BN2: gl.constexpr = w2_desc.block_type.shape[0]
        dtype: gl.constexpr = x_desc.dtype
        # Grouped raster over 8 tile rows (at GPT-2's 8 tile rows, a column of 8 CTAs reads one W
        # panel from DRAM; at 8192^3 a wave spans 8 X and ~17 W panels).
        GROUP_M: gl.constexpr = 8
        tile_m, tile_n = tile_origin(gl.program_id(0), gl.cdiv(M, 2 * HALF), gl.cdiv(N, BN + BN2), GROUP_M)
        off_m = tile_m * 2 * HALF
        off_n = tile_n * (BN + BN2)
        k_tiles = gl.cdiv(K, BK)

        x_smem = gl.allocate_shared_memory(dtype, [2 * STAGES, HALF, BK], x_desc.layout)
        w_smem = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], w_desc.layout)
        w2_smem = gl.allocate_shared_memory(dtype, [STAGES, BN2, BK], w2_desc.layout)
        y_smem = gl.allocate_shared_memory(dtype, [2, HALF, BN], y_desc.layout)
        y2_smem = gl.allocate_shared_memory(dtype, [2, HALF, BN2], y2_desc.layout)
        full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(STAGES):
            mbarrier.init(full.index(s), count=1)
            mbarrier.init(empty.index(s), count=2)  # one arrive per consumer warpgroup

        mma0 = (x_smem, w_smem, w2_smem, full, empty, y_desc, y2_desc, y_smem.index(0), y2_smem.index(0), b_ptr, N,
                off_m, off_n, k_tiles, 0, OVERLAP_STORE, trace)  # fmt: skip
        mma1 = (x_smem, w_smem, w2_smem, full, empty, y_desc, y2_desc, y_smem.index(1), y2_smem.index(1), b_ptr, N,
                off_m, off_n, k_tiles, 1, OVERLAP_STORE, trace)  # fmt: skip
        load = (x_desc, w_desc, w2_desc, x_smem, w_smem, w2_smem, full, empty, off_m, off_n, k_tiles, trace)
        gl.warp_specialize([(_ws_mma, mma0), (_ws_mma, mma1), (_ws_load, load)], [4, 1], [232, 40])


def unsupported_reason(device: torch.device, dtype: torch.dtype, k: int, n: int) -> str | None:
    """Why the Gluon GEMM cannot run here (None: it can)."""
    reason = sm90_reason(device, "GEMM", dtype)
    if reason:
        return reason
    if k % 8 or n % 8:
        return "TMA needs 16-byte row strides: K and N multiples of 8"
    return None


def descriptors(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, block_k: int = BLOCK_K) -> tuple:
    """Host TMA descriptors: X in two 64-row boxes (one per consumer), W in a 128- and a 64-row box,
    Y in 64 x 128 and 64 x 64 boxes. Reads past M, N or K are zero-filled, stores past them dropped."""
    gdtype = gl.bfloat16 if x.dtype == torch.bfloat16 else gl.float16

    def describe(t: torch.Tensor, box: list[int]):
        return TensorDescriptor(
            t, list(t.shape), [t.shape[1], 1], box, gl.NVMMASharedLayout.get_default_for(box, gdtype)
        )

    return (
        describe(x, [HALF_M, block_k]),
        describe(w, [BLOCK_N, block_k]),
        describe(w, [BLOCK_N2, block_k]),
        describe(out, [HALF_M, BLOCK_N]),
        describe(out, [HALF_M, BLOCK_N2]),
    )


def cta_count(m: int, n: int) -> int:
    """CTAs in a launch over Y [m, n]: one 128 x 192 tile each (the grid)."""
    return math.ceil(m / (2 * HALF_M)) * math.ceil(n / (BLOCK_N + BLOCK_N2))


def trace_buffer(m: int, n: int, device) -> torch.Tensor:
    """Zeroed stamps for a traced launch over Y [m, n]: prepare's ``trace``, TRACE_SLOTS a CTA."""
    return torch.zeros(cta_count(m, n) * TRACE_SLOTS, dtype=torch.int64, device=device)


def prepare(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor,
    stages: int = STAGES,
    block_k: int = BLOCK_K,
    overlap_store: bool = OVERLAP_STORE,
    trace: torch.Tensor | None = None,
) -> Callable[[], torch.Tensor]:
    """The launch over contiguous x [M, K], w [N, K], b [N]: ``prepare(x, w, b)()`` -> Y [M, N].
    Arguments other than the defaults are for the device scripts' sweeps; ``trace`` (trace_buffer's)
    receives each CTA's stamps."""
    m, k = x.shape
    n = w.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    descs = descriptors(x, w, out, block_k)
    grid = (cta_count(m, n),)
    if trace is not None and trace.numel() < grid[0] * TRACE_SLOTS:
        raise ValueError(f"trace holds {trace.numel()} stamps; {grid[0]} CTAs need {grid[0] * TRACE_SLOTS}")

    stamps = trace if trace is not None else torch.empty(1, dtype=torch.int8, device=x.device)

    def run() -> torch.Tensor:
        _gemm_gelu_ws[grid](*descs, b, m, n, k, stamps, stages, overlap_store, num_warps=4)
        return out

    return run


def build_variant(case) -> Callable[[], torch.Tensor]:
    """gelu_linear's `triton_gluon` variant: skipped with the reason wherever it cannot run."""
    x, w, b = case["x"], case["w"], case["b"]
    reason = unsupported_reason(case.device, x.dtype, x.shape[1], w.shape[0])
    if reason:
        raise VariantSkipped(reason)
    return prepare(x.contiguous(), w.contiguous(), b.contiguous())


# sm_90, Gluon: a producer warp and two consumer warpgroups that never wait for each other, in place of
# the Triton pipeliner's CTA barrier each K step.
@FAMILY.variant("triton_gluon", kind="triton", needs=(NEEDS_CUDA, NEEDS_TRITON), dtypes=FLOAT_DTYPES)
def triton_gluon_variant(case):
    """sm_90: Gluon GEMM, TMA producer warp + 2 consumer warpgroups on mbarriers, bias + GELU epilogue"""
    return build_variant(case)
