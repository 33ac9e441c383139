"""layernorm_backward: triton implementation."""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import tl, triton
from rooflint.kernels.layernorm_backward import FAMILY, allocate, fused_modeled_bytes, num_programs


@triton.jit
def _rows_kernel(X, DY, W, MEAN, RSTD, DX, PDW, PDB, rows, N, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    """One program per partial row: a whole row in registers, fp32 column sums kept across its rows."""
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_N], dtype=tl.float32)
    # Rows strided by the grid: at any moment the running programs stream neighbouring rows.
    # STAGES > 1 software-pipelines the loop: the next STAGES - 1 rows of x, dy and the statistics
    # are copied asynchronously into shared memory (cp.async), so they stay in flight through this
    # row's reductions and barriers without holding registers (see rows_stages).
    for row in tl.range(pid, rows, step, num_stages=STAGES):
        offsets = tl.cast(row, tl.int64) * N + cols
        x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offsets, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + row)
        xhat = tl.where(mask, (x - tl.load(MEAN + row)) * rstd, 0.0)
        # g must stay a rounded product: c1 is a sum of rounded products, and g - c1 fused into
        # one FMA would leave each product's rounding error, times rstd (with N == 1, a nonzero dx
        # where the exact one is 0). A select did not stop ptxas from fusing them (fp32 300 x 1 on
        # an H100 and an H200: relative error 2.6e-5 against fp32's 1e-5), so the launch turns FP
        # contraction off for this kernel: a memory-bound loop loses nothing to a few unfused FMAs.
        g = tl.where(mask, dy * w, 0.0)
        c1 = tl.sum(g, axis=0) / N
        c2 = tl.sum(g * xhat, axis=0) / N
        tl.store(DX + offsets, ((g - c1 - xhat * c2) * rstd).to(DX.dtype.element_ty), mask=mask)
        dw += dy * xhat
        db += dy
    tl.store(PDW + pid * N + cols, dw, mask=mask)
    tl.store(PDB + pid * N + cols, db, mask=mask)


@triton.jit
def _row_coefficients_kernel(X, DY, W, MEAN, RSTD, C1, C2, N, BLOCK_N: tl.constexpr):
    """Rows wider than a block, pass 1: c1 = mean(g) and c2 = mean(g * xhat), one program per row."""
    row = tl.program_id(0)
    base = tl.cast(row, tl.int64) * N
    mean, rstd = tl.load(MEAN + row), tl.load(RSTD + row)
    s1 = tl.zeros([BLOCK_N], dtype=tl.float32)
    s2 = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(X + base + cols, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(DY + base + cols, mask=mask, other=0.0).to(tl.float32) * tl.load(W + cols, mask=mask, other=0.0)
        s1 += g
        s2 += g * tl.where(mask, (x - mean) * rstd, 0.0)
    tl.store(C1 + row, tl.sum(s1, axis=0) / N)
    tl.store(C2 + row, tl.sum(s2, axis=0) / N)


@triton.jit
def _column_chunks_kernel(X, DY, W, MEAN, RSTD, C1, C2, DX, PDW, PDB, rows, N, BLOCK_N: tl.constexpr):
    """Rows wider than a block, pass 2: program (p, chunk) owns one column chunk of its rows."""
    pid = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_N], dtype=tl.float32)
    for row in range(pid, rows, tl.num_programs(0)):
        offsets = tl.cast(row, tl.int64) * N + cols
        x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offsets, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + row)
        xhat = tl.where(mask, (x - tl.load(MEAN + row)) * rstd, 0.0)
        g = tl.where(mask, dy * w, 0.0)  # a rounded product, as in c1 (see _rows_kernel)
        dx = (g - tl.load(C1 + row) - xhat * tl.load(C2 + row)) * rstd
        tl.store(DX + offsets, dx.to(DX.dtype.element_ty), mask=mask)
        dw += dy * xhat
        db += dy
    tl.store(PDW + pid * N + cols, dw, mask=mask)
    tl.store(PDB + pid * N + cols, db, mask=mask)


@triton.jit
def _sum_partials_kernel(PARTIAL, DW, DB, programs, N, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    """Stage two: program (c, t) adds column block c of the partial rows of dweight (t = 0) or dbias
    (t = 1) in fp32, then rounds once to the output dtype."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    part = PARTIAL + tl.program_id(1) * programs * N
    total = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    # BLOCK_P covers every partial row in one step (up to 512): a step's loads are all in flight
    # at once, so this latency-bound kernel waits on memory once, not once per row.
    for start in range(0, programs, BLOCK_P):
        p = start + tl.arange(0, BLOCK_P)
        mask = (p[:, None] < programs) & col_mask[None, :]
        total += tl.load(part + p[:, None] * N + cols[None, :], mask=mask, other=0.0)
    total = tl.sum(total, axis=0)
    if tl.program_id(1) == 0:
        tl.store(DW + cols, total.to(DW.dtype.element_ty), mask=col_mask)
    else:
        tl.store(DB + cols, total.to(DB.dtype.element_ty), mask=col_mask)


# The widest row held in registers: 8192 fp32 values per tensor over 16 warps is 16 registers each
# for x, dy, w and the two column sums.
MAX_BLOCK_N = 8192


def triton_config(n: int) -> tuple[int, int]:
    """(BLOCK_N, num_warps) for a row of n: 8 to 16 elements per thread and tensor."""
    block = triton.next_power_of_2(n)
    return block, min(16, max(4, block // 512))


# Shared memory a program needs besides its row buffers: the reductions' scratch and the 1 KB per
# block the driver reserves.
SHARED_RESERVE = 8 * 1024


def rows_stages(block: int, element_size: int, programs_per_sm: int, shared_per_sm: int) -> int:
    """num_stages for _rows_kernel's row loop: 1 (no pipeline), or 3 or 4 (2 or 3 row buffers).

    Without a pipeline a program has one row of loads in flight, and none while it reduces and
    writes dx: 2 programs per SM (registers allow no more) were enough for the H100 but leave the
    H200 (1.48x the bandwidth, same SMs and latency) short of bytes in flight. Pipelined, the loads
    of the next STAGES - 1 rows land in shared memory, so STAGES - 2 rows stay in flight through
    each row's compute; 3 buffers of a 16-bit row of 4096 are 48 KB. The buffers must fit the SM's
    shared memory for every resident program, and 2 buffers is the least that overlaps anything
    (with one, the next row's copy starts only after this row is done). Only 16-bit inputs: with
    fp32 ones the pipelined kernel needs 169-172 registers a thread at 16 values per thread (ptxas
    for sm_90), past the 128 that keep 2 programs of 8 warps per SM, while an fp32 row is twice the
    bytes in flight anyway."""
    if element_size > 2:
        return 1
    budget = shared_per_sm // programs_per_sm - SHARED_RESERVE
    buffers = min(3, budget // (2 * block * element_size))
    return buffers + 1 if buffers >= 2 else 1


def triton_layernorm_backward(
    x, dy, weight, mean, rstd, *, programs=None, max_block=MAX_BLOCK_N, num_warps=None, out=None
):
    rows, n = x.shape
    programs = out[3].shape[1] if out else programs or num_programs(rows, x.device)
    dx, dweight, dbias, partial = out or allocate(x, weight, programs)
    block, warps = triton_config(n)
    if block <= max_block:
        stages = 1
        if x.device.type == "cuda":  # the interpreter ignores num_stages
            props = torch.cuda.get_device_properties(x.device)
            per_sm = triton.cdiv(programs, props.multi_processor_count)
            stages = rows_stages(block, x.element_size(), per_sm, props.shared_memory_per_multiprocessor)
        args = (x, dy, weight, mean, rstd, dx, partial[0], partial[1], rows, n)
        _rows_kernel[(programs,)](*args, block, stages, num_warps=num_warps or warps, enable_fp_fusion=False)
    else:
        # Too wide for registers: the row coefficients first (x and dy are read twice), then each
        # program owns a column chunk of its rows so the column sums still stay in registers.
        block = min(max_block, 4096)
        c1, c2 = torch.empty((2, rows), dtype=torch.float32, device=x.device)
        _row_coefficients_kernel[(rows,)](x, dy, weight, mean, rstd, c1, c2, n, block, num_warps=8)
        grid = (programs, triton.cdiv(n, block))
        args = (x, dy, weight, mean, rstd, c1, c2, dx, partial[0], partial[1], rows, n)
        _column_chunks_kernel[grid](*args, block, num_warps=8)
    # 16 columns (two 32-byte sectors of each partial row) and dweight and dbias apart: 512
    # programs for n = 4096, ~4 per SM, so every SM has its share of the reads in flight at once.
    block_p = min(512, triton.next_power_of_2(programs))
    grid = (triton.cdiv(n, 16), 2)
    _sum_partials_kernel[grid](partial, dweight, dbias, programs, n, block_p, 16, num_warps=8)
    return dx, dweight, dbias


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON), modeled_bytes=fused_modeled_bytes)
def triton_variant(case):
    """fused pipelined rows kernel, 1 program per SM, fp32 per-program partials, then a partial-sum kernel"""
    x = case["x"]
    args = x, case["dy"], case["weight"], case["mean"], case["rstd"]
    out = allocate(x, case["weight"], num_programs(x.shape[0], x.device))
    return lambda: triton_layernorm_backward(*args, out=out)
