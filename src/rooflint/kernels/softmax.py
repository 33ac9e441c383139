"""softmax: row-wise over the last dimension of a [rows, cols] tensor.

A reduction followed by an elementwise pass: 5 FLOPs per element against 4 bytes (bf16 in and
out), so memory-bound. The floor is one read and one write per element, reached only when a
row stays on chip (registers) between finding its max and sum and writing its outputs.
"""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC, NEEDS_TRITON, Cost, Family, element_size, randn
from rooflint.core.triton_compat import tl, triton
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype


def make_inputs(params, dtype, device, generator):
    return {"x": randn([params["rows"], params["cols"]], dtype, device, generator)}


def reference(inputs, params):
    x = inputs["x"]
    out = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    # Chunks of rows keep the float64 temporaries near 1.5 GB at the large size.
    step = max(1, (1 << 26) // max(1, x.shape[1]))
    for start in range(0, x.shape[0], step):
        out[start : start + step] = torch.softmax(x[start : start + step].double(), dim=-1)
    return out


def cost(params, dtype):
    rows, cols, size = params["rows"], params["cols"], element_size(dtype)
    n = rows * cols
    return Cost(
        # per element: max compare, subtract, exp (counted as 1), sum add, divide; the one
        # reciprocal per row is left out, like the peers' count (AI 1.25 in bf16).
        cuda_flops=5 * n,
        bytes=n * size  # read x once
        + n * size,  # write y once
    )


def _unfused_bytes(params, dtype):
    rows, n, size = params["rows"], params["rows"] * params["cols"], element_size(dtype)
    return (
        n * size
        + rows * size  # amax: read x, write the row maxima
        + 2 * n * size
        + rows * size  # x - max: read x and the maxima, write
        + 2 * n * size  # exp: read, write
        + n * size
        + rows * size  # sum: read, write the row sums
        + 2 * n * size
        + rows * size  # divide: read e and the sums, write y
    )


FAMILY = Family(
    "softmax",
    summary="row-wise softmax over the last dim",
    sizes={
        "small": [{"rows": 37, "cols": 1000}],
        # 2^28 elements: 1 GiB moved in bf16, 20x the H100's 50 MB L2.
        "large": [{"rows": 16384, "cols": 16384}],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
)


def softmax_unfused(x):
    """max, subtract, exp, sum, divide: five kernels, each a full trip through HBM."""
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


@FAMILY.variant("eager_unfused", modeled_bytes=_unfused_bytes)
def eager_unfused(case):
    """amax, sub, exp, sum, div: 5 kernels"""
    x = case["x"]
    return lambda: softmax_unfused(x)


@FAMILY.variant("eager", baseline=True)
def eager(case):
    """torch.softmax"""
    x = case["x"]
    return lambda: torch.softmax(x, dim=-1)


def softmax_unfused_max(x):
    """The same math with x.max(...).values, the other way people write the row max."""
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def softmax_builtin(x):
    return torch.softmax(x, dim=-1)


# torch.compile of each natural way to write softmax, each its own row. The spelling matters: on an
# H100 inductor compiled the amax form 1.5x slower than the max().values form (0.567 vs 0.378 ms
# at the large size), so one form alone can make the compiler look weaker than it is.
@FAMILY.variant("compile_unfused", kind="compile")
def compiled_unfused(case):
    """torch.compile of the unfused form, row max by x.amax"""
    x = case["x"]
    fn = torch.compile(softmax_unfused, dynamic=False)
    return lambda: fn(x)


@FAMILY.variant("compile_max", kind="compile")
def compiled_max(case):
    """torch.compile of the unfused form, row max by x.max(...).values"""
    x = case["x"]
    fn = torch.compile(softmax_unfused_max, dynamic=False)
    return lambda: fn(x)


@FAMILY.variant("compile_builtin", kind="compile")
def compiled_builtin(case):
    """torch.compile of torch.softmax"""
    x = case["x"]
    fn = torch.compile(softmax_builtin, dynamic=False)
    return lambda: fn(x)


def _check_layout(x):
    # The kernels index rows as x + row * cols: they need a dense 2-D tensor.
    if x.dim() != 2 or not x.is_contiguous():
        raise ValueError(f"expected a contiguous 2-D tensor, got shape {tuple(x.shape)} strides {x.stride()}")


@triton.jit
def _softmax_rows_kernel(x_ptr, y_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # BLOCK_R whole rows per program, held in registers from load to store: one HBM read and one
    # write per element, the floor. Padding lanes load -inf so they add nothing to max or sum.
    r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.arange(0, BLOCK_C)
    row_ok = r < rows
    mask = row_ok[:, None] & (c < cols)[None, :]
    offsets = r[:, None] * cols + c[None, :]
    x = tl.load(x_ptr + offsets, mask=mask, other=float("-inf")).to(tl.float32)
    # Rows past the end (all padding) get max 0 and sum 1, so they stay NaN-free.
    m = tl.where(row_ok, tl.max(x, axis=1), 0.0)
    e = tl.exp(x - m[:, None])
    inv = 1.0 / tl.where(row_ok, tl.sum(e, axis=1), 1.0)
    tl.store(y_ptr + offsets, (e * inv[:, None]).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_looped_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    # Rows too wide for registers: pass 1 keeps a running max and a running sum rescaled to it
    # per lane (online softmax), pass 2 re-reads the row and writes. Two reads and one write per
    # element; for rows up to ~64 KB the re-read of a row just streamed mostly hits L2 (all
    # rows in flight fit in its 50 MB), for 256 KB rows much of it goes back to HBM.
    base = tl.program_id(0).to(tl.int64) * cols
    lanes = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, cols, BLOCK):
        mask = start + lanes < cols
        x = tl.load(x_ptr + base + start + lanes, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # lanes with no data yet stay 0
        s = s * tl.exp(m - shift) + tl.exp(x - shift)
        m = m_new
    row_max = tl.max(m, axis=0)
    inv = 1.0 / tl.sum(s * tl.exp(m - row_max), axis=0)
    for start in range(0, cols, BLOCK):
        mask = start + lanes < cols
        x = tl.load(x_ptr + base + start + lanes, mask=mask, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - row_max) * inv
        tl.store(y_ptr + base + start + lanes, y.to(y_ptr.dtype.element_ty), mask=mask)


# Widest row kept in registers: 32768 fp32 values over 32 warps is 32 a thread; wider rows
# would spill, so they take the looped kernel. On the H100 at 32768 bf16 columns the register
# path ran 0.372 ms against 0.534 ms looped (docs/perf-notes/gelu-softmax.md).
MAX_FUSED_COLS = 32768
LOOP_BLOCK = 4096


def _row_warps(elements: int) -> int:
    # About 32 fp32 values a thread: registers stay well under the spill limit while each
    # thread still has several 16-byte loads in flight.
    return max(1, min(32, elements // 1024))


def triton_softmax(x, out=None, max_fused_cols=MAX_FUSED_COLS, loop_block=LOOP_BLOCK, num_warps=None):
    """Rows up to ``max_fused_cols`` wide in registers, wider ones looped ``loop_block`` at a time."""
    _check_layout(x)
    rows, cols = x.shape
    out = torch.empty_like(x) if out is None else out
    if cols <= max_fused_cols:
        block_c = triton.next_power_of_2(cols)
        # Narrow rows: several per program, so each program still moves a few KB.
        block_r = max(1, min(2048 // block_c, triton.next_power_of_2(rows)))
        warps = num_warps or _row_warps(block_c * block_r)
        grid = (triton.cdiv(rows, block_r),)
        _softmax_rows_kernel[grid](x, out, rows, cols, BLOCK_R=block_r, BLOCK_C=block_c, num_warps=warps)
    else:
        _softmax_looped_kernel[(rows,)](x, out, cols, BLOCK=loop_block, num_warps=num_warps or 8)
    return out


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case):
    """Triton: row in registers up to 32768 cols, online two-pass beyond"""
    x = case["x"]
    out = torch.empty_like(x)
    return lambda: triton_softmax(x, out)


# CUDA paths (kernels/softmax.cu): auto picks by row width (registers up to 32768 columns).
CUDA_MODES = {"auto": 0, "registers": 1, "looped": 2}


def cuda_softmax(x, out=None, threads=0, mode="auto"):
    _check_layout(x)
    library = cuda_build.load(cuda_build.family_source(__file__))
    out = torch.empty_like(x) if out is None else out
    rows, cols = x.shape
    library.launch("rooflint_softmax", x, out, rows, cols, cuda_dtype(x.dtype), threads, CUDA_MODES[mode])
    return out


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC))
def cuda_variant(case):
    """CUDA C++: a block per row cached on chip, online two-pass for rows over 32768"""
    x = case["x"]
    out = torch.empty_like(x)
    return lambda: cuda_softmax(x, out)
