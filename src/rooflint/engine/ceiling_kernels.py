"""Triton kernels that measure ceilings no library call exposes: L2 bandwidth, a read-only DRAM
stream and the FP32 FMA peak."""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

Timer = Callable[[Callable[[], object], int], float]  # (fn, reps) -> median milliseconds

L2_BLOCK = 4096
FMA_BLOCK = 1024
FMA_UNROLL = 16  # FMAs per chain per loop trip: amortizes the loop's compare-and-branch


@triton.jit
def _l2_copy_kernel(src_ptr, dst_ptr, n_blocks, passes, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for p in range(passes):
        # Each program walks consecutive blocks from its own start, so over the passes every SM
        # touches many different blocks: a block re-read by the same SM would come from its L1.
        block = (pid * passes + p) % n_blocks
        offsets = block.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        # .cg caches the load in L2 only, so the L1 cannot serve it either.
        tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, cache_modifier=".cg"))


def l2_copy(src: torch.Tensor, dst: torch.Tensor, programs: int, passes: int) -> None:
    n_blocks = src.numel() // L2_BLOCK
    _l2_copy_kernel[(programs,)](src, dst, n_blocks, passes, BLOCK=L2_BLOCK, num_warps=8)


def l2_copy_gbps(l2_bytes: int, timer: Timer) -> float:
    """Copy bandwidth with both buffers resident in L2 (read + write bytes per second).

    Source and destination together take a quarter of the L2, so they stay resident while the
    kernel copies them over and over in one launch (a launch per pass would measure launch time:
    a 6 MB copy at L2 speed takes about a microsecond).
    """
    n_blocks = max(1, l2_bytes // 8 // (L2_BLOCK * 4))
    src = torch.randn(n_blocks * L2_BLOCK, device="cuda")
    dst = torch.empty_like(src)
    programs, passes = n_blocks, 256
    ms = timer(lambda: l2_copy(src, dst, programs, passes), 20)
    return 2 * programs * passes * L2_BLOCK * 4 / (ms * 1e-3) / 1e9


@triton.jit
def _fma_kernel(out_ptr, coef_ptr, iters, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    # Coefficients come from memory at run time, so the compiler cannot fold the chain; a < 1 and
    # b > 0 keep x near b / (1 - a) = 1: no overflow, no denormals (which would slow the FMAs).
    a = tl.load(coef_ptr)
    b = tl.load(coef_ptr + 1)
    x = offsets.to(tl.float32) * 1e-7
    y = x + 0.5
    for _ in range(iters):
        # Two independent chains per element, and BLOCK / threads elements per thread: enough
        # independent FMAs in flight to hide the 4-cycle FMA latency on every issue slot.
        for _u in tl.static_range(UNROLL):
            x = tl.fma(x, a, b)
            y = tl.fma(y, a, b)
    # The result is stored, so the chain is live and cannot be removed as dead code.
    tl.store(out_ptr + offsets, x + y)


def fma_chain(out: torch.Tensor, coef: torch.Tensor, iters: int, unroll: int = FMA_UNROLL) -> None:
    programs = out.numel() // FMA_BLOCK
    _fma_kernel[(programs,)](out, coef, iters, BLOCK=FMA_BLOCK, UNROLL=unroll, num_warps=4)


def fma_flops(n_elements: int, iters: int, unroll: int = FMA_UNROLL) -> float:
    return 2.0 * n_elements * 2 * iters * unroll  # 2 FLOPs an FMA, 2 chains an element


def fma_tflops(sm_count: int, timer: Timer, iters: int = 4096) -> float:
    """FP32 FMA throughput from a kernel with 16 programs of 4 warps per SM (64 warps: full occupancy)."""
    out = torch.empty(sm_count * 16 * FMA_BLOCK, device="cuda")
    coef = torch.tensor([0.9999, 1e-4], device="cuda")
    ms = timer(lambda: fma_chain(out, coef, iters), 10)
    return fma_flops(out.numel(), iters) / (ms * 1e-3) / 1e12


# A read stream: HBM serves pure reads with no read/write bus turnaround, so it runs faster than a
# copy (a decode kernel streaming its KV cache can beat the copy ceiling). The memory ceiling is
# the best stream the GPU really sustains, so it is measured both ways.
READ_BLOCK = 4096  # fp32 per load step of a program: 16 KB, 16 bytes per thread per load at 8 warps
READ_UNROLL = 4  # independent loads issued before the first add: bytes in flight (Little's law)
# (programs per SM, warps): a few shapes, the best one taken, since a ceiling is an upper bound.
READ_SHAPES = ((4, 8), (8, 8), (4, 16))


@triton.jit
def _read_sum_kernel(src_ptr, partial_ptr, n_groups, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    acc = tl.zeros([BLOCK], tl.float32)
    # Groups of UNROLL blocks are dealt round-robin: the programs resident at one moment read one
    # sliding window of memory rather than hundreds of streams megabytes apart (DRAM page hits).
    for i in range(0, tl.cdiv(n_groups - pid, programs)):
        group = pid.to(tl.int64) + i * programs
        base = src_ptr + group * (BLOCK * UNROLL)
        for u in tl.static_range(UNROLL):
            # .cg: cached in L2 only; every byte is read once, so L1 would only take space.
            acc += tl.load(base + u * BLOCK + tl.arange(0, BLOCK), cache_modifier=".cg")
    # The sum is stored, so the loads are live; one float per program is all that is written.
    tl.store(partial_ptr + pid, tl.sum(acc))


def read_sum(src: torch.Tensor, partials: torch.Tensor, warps: int = 8, unroll: int = READ_UNROLL) -> None:
    """partials[p] = the sum of the blocks program p read; src.numel() a multiple of READ_BLOCK * unroll."""
    n_groups = src.numel() // (READ_BLOCK * unroll)
    _read_sum_kernel[(partials.numel(),)](src, partials, n_groups, BLOCK=READ_BLOCK, UNROLL=unroll, num_warps=warps)


def read_gbps(n_bytes: int, sm_count: int, timer: Timer) -> float:
    """DRAM read bandwidth (bytes read per second) of a summing stream over ``n_bytes`` of fp32,
    the best of READ_SHAPES. The buffer must dwarf the L2, as the copy's does."""
    group = READ_BLOCK * READ_UNROLL
    src = torch.rand(max(1, n_bytes // 4 // group) * group, device="cuda")
    best = 0.0
    for per_sm, warps in READ_SHAPES:
        partials = torch.empty(sm_count * per_sm, device="cuda")
        ms = timer(lambda partials=partials, warps=warps: read_sum(src, partials, warps), 30)
        best = max(best, src.numel() * 4 / (ms * 1e-3) / 1e9)
    return best


def memory_ceilings(copy_gbps: float, read_gbps: float) -> dict[str, float]:
    """The stored memory fields: both streams, and memory_bandwidth_gbps, the roof rooflint draws,
    as the faster of the two (the best stream the GPU sustains; the datasheet stays the outer roof)."""
    return {
        "copy_bandwidth_gbps": copy_gbps,
        "read_bandwidth_gbps": read_gbps,
        "memory_bandwidth_gbps": max(copy_gbps, read_gbps),
    }
