"""layernorm_backward: dx, dweight and dbias of y = LayerNorm(x) * weight + bias over the last dim.

With xhat = (x - mean) * rstd and g = dy * weight, per row of N:
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
and over all rows: dweight = sum(dy * xhat), dbias = sum(dy).
dx needs two row reductions; dweight and dbias are column reductions over every row. A fused
kernel reads x and dy once: each program owns a set of rows, keeps fp32 column sums for them in
registers, and writes one partial row per program; a second small kernel adds the partials. That
two-stage sum is deterministic and keeps fp32 accuracy, unlike one atomic add per element.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC, NEEDS_TRITON, Cost, Family, element_size, randn
from rooflint.core.triton_compat import tl, triton
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype

EPS = 1e-5
# H100 SXM's SM count: the number of partial rows the fused kernels write is a multiple of it.
H100_SMS = 132


def make_inputs(params, dtype, device, generator):
    rows, hidden = params["rows"], params["hidden"]
    x = randn([rows, hidden], dtype, device, generator)
    # The forward pass saves mean and rstd in fp32 (as PyTorch's CUDA layer_norm does for every dtype).
    # Computed in float64 and rounded once, so they are the correctly rounded statistics: with
    # hidden == 1 the mean is then x itself and xhat exactly 0, as in the float64 reference.
    var, mean = torch.var_mean(x.double(), dim=-1, unbiased=False)
    return {
        "x": x,
        "weight": randn([hidden], dtype, device, generator),
        "bias": randn([hidden], dtype, device, generator),  # only for the reference's forward and eager's dbias shape
        "dy": randn([rows, hidden], dtype, device, generator),
        "mean": mean.float().contiguous(),
        "rstd": torch.rsqrt(var + EPS).float().contiguous(),
    }


def reference(inputs, params):
    # Autograd in float64. [16384, 4096] is 0.5 GB per float64 tensor; autograd keeps a handful: fine.
    # bench builds references under no_grad; autograd needs grad mode back on.
    with torch.enable_grad():
        x = inputs["x"].double().requires_grad_()
        weight = inputs["weight"].double().requires_grad_()
        bias = inputs["bias"].double().requires_grad_()
        y = F.layer_norm(x, (params["hidden"],), weight, bias, EPS)
        y.backward(inputs["dy"].double())
    return x.grad, weight.grad, bias.grad


def compare(output, reference):
    # With hidden == 1, xhat is 0, so dx and dweight are exactly 0; float64 autograd leaves ~1e-14
    # there, against which any relative error is 1. An RMS under 1e-10 cannot be a real gradient
    # of O(1) random inputs, so it is compared as the exact zero it stands for.
    exact = tuple(torch.zeros_like(r) if r.square().mean().sqrt().item() < 1e-10 else r for r in reference)
    return output, exact


def cost(params, dtype):
    rows, hidden, size = params["rows"], params["hidden"], element_size(dtype)
    elements = rows * hidden
    return Cost(
        # Per element: xhat = (x - mean) * rstd (2), g = dy * w (1), sum g (1), sum g*xhat (2),
        # dx = rstd * (g - c1 - xhat * c2) (4), dweight += dy * xhat (2), dbias += dy (1): 13.
        # Per row: c1 and c2 divide the two sums by N (2).
        cuda_flops=13 * elements + 2 * rows,
        bytes=2 * elements * size  # read x and dy
        + hidden * size  # read weight
        + 2 * rows * 4  # read the saved fp32 mean and rstd
        + elements * size  # write dx
        + 2 * hidden * size,  # write dweight and dbias
    )


# Programs per SM of the Triton rows kernel. One: at 156 registers x 256 threads (ncu, round 7) a
# second program does not fit beside the first, so a grid of two per SM ran as two waves and the
# second wave ramped up again. One program per SM with 3 row buffers in flight measured +4.6% on an
# H100 and +3.4% on an H200 (do_bench, scripts/device/lnb_sweep.py; 16 warps lost on both).
TRITON_PROGRAMS_PER_SM = 1
# The CUDA kernel's capacity: blocks it may keep resident per SM (its launcher sizes its grid).
CUDA_PROGRAMS_PER_SM = 4


def num_programs(rows: int, device: torch.device | None = None, per_sm: int = TRITON_PROGRAMS_PER_SM) -> int:
    """Programs of the fused kernels, each writing one fp32 partial row of dweight and dbias."""
    if device is not None and device.type == "cuda":
        sms = torch.cuda.get_device_properties(device).multi_processor_count
    elif device is not None:
        sms = 2  # the CPU interpreter: a few programs still exercise the cross-program sum
    else:
        sms = H100_SMS
    return max(1, min(rows, per_sm * sms))


def fused_modeled_bytes(params, dtype, per_sm: int = TRITON_PROGRAMS_PER_SM):
    # The ideal traffic plus the partial sums: each program writes an fp32 partial row of dweight
    # and dbias, and the second kernel reads them back (2-4% of the ideal at the large size).
    programs = num_programs(params["rows"], torch.device("cuda") if torch.cuda.is_available() else None, per_sm)
    return cost(params, dtype).bytes + 2 * 2 * programs * params["hidden"] * 4


def eager_modeled_bytes(params, dtype):
    # PyTorch's CUDA backward runs dx and dweight/dbias as two kernels, each reading x and dy.
    return cost(params, dtype).bytes + 2 * params["rows"] * params["hidden"] * element_size(dtype)


def unfused(x, dy, weight, mean, rstd):
    """The backward formulas as separate PyTorch ops, in fp32 like the fused kernels."""
    x32, dy32, w32 = x.float(), dy.float(), weight.float()
    mean, rstd = mean[:, None], rstd[:, None]
    xhat = (x32 - mean) * rstd
    g = dy32 * w32
    c1 = g.mean(dim=-1, keepdim=True)
    c2 = (g * xhat).mean(dim=-1, keepdim=True)
    dx = (g - c1 - xhat * c2) * rstd
    dweight = (dy32 * xhat).sum(dim=0)
    dbias = dy32.sum(dim=0)
    return dx.to(x.dtype), dweight.to(weight.dtype), dbias.to(weight.dtype)


def unfused_modeled_bytes(params, dtype):
    # E fp32 elements are 4E bytes. Ops with one full-size input read 4E and write 4E:
    # x - mean, * rstd, dy * w, g - c1, xhat * c2, * rstd (6 ops, 48E). Ops with two read 8E and
    # write 4E: g * xhat, the subtraction, dy * xhat (3 ops, 36E). The four reductions read 4E each
    # (16E). Casting x and dy up and dx down moves (size + 4)E each, unless the dtype is fp32 already.
    # The per-row and per-column vectors are under 0.1% and left out.
    elements, size = params["rows"] * params["hidden"], element_size(dtype)
    casts = 0 if size == 4 else 3 * (size + 4)
    return elements * (48 + 36 + 16 + casts)


FAMILY = Family(
    "layernorm_backward",
    summary="dx, dweight, dbias of LayerNorm over the last dim, from saved fp32 mean and rstd",
    sizes={
        "small": [{"rows": 257, "hidden": 1000}],
        # x, dy and dx are 128 MiB each in bf16: 400 MB moved, 8x the H100's 50 MB L2.
        "large": [{"rows": 16384, "hidden": 4096}],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
    # dx and the two column sums are each rounded once from fp32 to the output dtype. Measured on
    # the H100 at the large size (16384-row column sums), worst of dx/dweight/dbias: fp32 2.2e-7
    # (eager 4.2e-7), fp16 2.07e-4, bf16 1.69e-3; on CPU at 257x1000 the same (the interpreter's
    # bf16 cast truncates instead of rounding: 3.3e-3). The fp32 sums' own rounding, ~sqrt(16384)
    # x 6e-8 at worst, is invisible next to the final rounding. The defaults (1e-5, 2e-3, 1.6e-2)
    # hold all of that with a margin of 5-45x and still fail a low-precision accumulator: PyTorch's
    # CPU backward gets even dbias = sum(dy) 3.7e-2 wrong in bf16 at 2048 rows.
    compare=compare,
)


def builtin_arguments(case):
    """native_layer_norm_backward's arguments, with the saved statistics in the dtype PyTorch's
    forward saves them in on this device (fp32 on CUDA; the input dtype on CPU, whose backward
    insists on it)."""
    x, dy, weight, bias = case["x"], case["dy"], case["weight"], case["bias"]
    saved = torch.ops.aten.native_layer_norm(x[:1], [x.shape[1]], weight, bias, EPS)[1].dtype
    mean, rstd = case["mean"][:, None].to(saved), case["rstd"][:, None].to(saved)
    return dy, x, mean, rstd, weight, bias


def builtin(dy, x, mean, rstd, weight, bias):
    return torch.ops.aten.native_layer_norm_backward(dy, x, [x.shape[1]], mean, rstd, weight, bias, [True] * 3)


@FAMILY.variant("eager", modeled_bytes=eager_modeled_bytes, baseline=True)
def eager(case):
    """aten.native_layer_norm_backward, PyTorch's built-in backward"""
    args = builtin_arguments(case)
    return lambda: builtin(*args)


@FAMILY.variant("eager_unfused", modeled_bytes=unfused_modeled_bytes)
def eager_unfused(case):
    """the formulas as separate fp32 PyTorch ops"""
    args = case["x"], case["dy"], case["weight"], case["mean"], case["rstd"]
    return lambda: unfused(*args)


# torch.compile of each natural way to write the backward, each its own row.
@FAMILY.variant("compile_unfused", kind="compile")
def compiled_unfused(case):
    """torch.compile of the unfused formulas"""
    args = case["x"], case["dy"], case["weight"], case["mean"], case["rstd"]
    fn = torch.compile(unfused, dynamic=False)
    return lambda: fn(*args)


@FAMILY.variant("compile_builtin", kind="compile")
def compiled_builtin(case):
    """torch.compile of aten.native_layer_norm_backward (inductor decomposes it)"""
    args = builtin_arguments(case)
    fn = torch.compile(builtin, dynamic=False)
    return lambda: fn(*args)


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


def allocate(x, weight, programs):
    """dx, dweight, dbias and the fp32 partial rows [2, programs, N], allocated once per case."""
    partial = torch.empty((2, programs, x.shape[1]), dtype=torch.float32, device=x.device)
    return torch.empty_like(x), torch.empty_like(weight), torch.empty_like(weight), partial


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


def cuda_layernorm_backward(x, dy, weight, mean, rstd, *, capacity=None, library=None, out=None):
    """The launcher sizes its own grid from the kernel's occupancy, up to `capacity` partial rows."""
    library = library or cuda_build.load(cuda_build.family_source(__file__))
    rows, n = x.shape
    capacity = out[3].shape[1] if out else capacity or num_programs(rows, x.device, per_sm=CUDA_PROGRAMS_PER_SM)
    dx, dweight, dbias, partial = out or allocate(x, weight, capacity)
    library.launch(
        "rooflint_layernorm_backward",
        *(x, dy, weight, mean, rstd, dx, dweight, dbias, partial),
        *(rows, n, capacity, cuda_dtype(x.dtype)),
    )
    return dx, dweight, dbias


def cuda_modeled_bytes(params, dtype):
    # The CUDA launcher keeps 2 blocks resident per SM at the large size (its register count), so
    # 2 partial rows per SM.
    return fused_modeled_bytes(params, dtype, per_sm=2)


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC), modeled_bytes=cuda_modeled_bytes)
def cuda_variant(case):
    """CUDA C++: rows in registers, next row prefetched, fp32 partials and a second sum kernel"""
    library = cuda_build.load(cuda_build.family_source(__file__))
    args = case["x"], case["dy"], case["weight"], case["mean"], case["rstd"]
    # Room for 4 blocks per SM; the launcher uses as many as are resident together.
    out = allocate(case["x"], case["weight"], num_programs(case["x"].shape[0], case["x"].device, CUDA_PROGRAMS_PER_SM))
    return lambda: cuda_layernorm_backward(*args, library=library, out=out)
