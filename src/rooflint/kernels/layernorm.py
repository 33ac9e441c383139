"""layernorm: y = (x - mean) * rstd * w + b over the last dim, saving mean and rstd for backward.

Memory-bound: one read of x and one write of y dominate (w and b are re-read by every row from
cache). The kernels here are shared with layernorm_gelu, which sets GELU and drops the statistics.
"""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC, NEEDS_TRITON, Cost, Family, element_size, randn
from rooflint.core.triton_compat import tl, triton
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype
from rooflint.kernels._gelu import gelu_tanh, mufu_form

EPS = 1e-5
# Widest row the Triton kernel keeps in registers as one tile (fp32: 64 KiB over 16 warps, 32
# registers a thread). Wider rows take the looped kernel, which reads x twice.
MAX_FUSED_BLOCK = 16384


def make_inputs(params, dtype, device, generator):
    rows, hidden = params["rows"], params["hidden"]
    return {
        "x": randn([rows, hidden], dtype, device, generator),
        "weight": randn([hidden], dtype, device, generator),
        "bias": randn([hidden], dtype, device, generator),
    }


def reference_normalized(inputs):
    """float64 (w * (x - mean) * rstd + b, mean, rstd) from the definitions."""
    x = inputs["x"].double()
    mean = x.mean(dim=-1)
    centered = x - mean[:, None]
    rstd = 1.0 / torch.sqrt((centered * centered).mean(dim=-1) + EPS)
    y = centered * rstd[:, None] * inputs["weight"].double() + inputs["bias"].double()
    return y, mean, rstd


def reference(inputs, params):
    return reference_normalized(inputs)


def cost(params, dtype):
    rows, hidden, size = params["rows"], params["hidden"], element_size(dtype)
    n = rows * hidden
    return Cost(
        # per element: add into the mean, subtract it, square and add for the variance,
        # scale by rstd, by w, add b; per row: two divisions by n, + eps, rsqrt
        cuda_flops=7 * n + 4 * rows,
        bytes=n * size  # read x
        + 2 * hidden * size  # read w and b once (every row re-reads them from cache)
        + n * size  # write y
        + 2 * rows * 4,  # write mean and rstd (fp32)
    )


def layernorm_unfused_fp32(x, weight, bias):
    """LayerNorm as separate PyTorch ops in fp32; returns fp32 (normalized affine, mean, rstd)."""
    xf = x.float()
    mean = xf.mean(dim=-1, keepdim=True)
    centered = xf - mean
    var = (centered * centered).mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(var + EPS)
    return centered * rstd * weight + bias, mean.squeeze(-1), rstd.squeeze(-1)


def layernorm_unfused(x, weight, bias):
    y, mean, rstd = layernorm_unfused_fp32(x, weight, bias)
    return y.to(x.dtype), mean, rstd


def unfused_trip_bytes(params, dtype):
    """HBM bytes of layernorm_unfused_fp32, one term per kernel; n-sized fp32 temporaries throughout."""
    rows, hidden, size = params["rows"], params["hidden"], element_size(dtype)
    n, f = rows * hidden, 4
    upcast = 0 if size == f else n * size + n * f  # x.float(): read x, write fp32 copy (a no-op for fp32)
    return (
        upcast
        + n * f  # mean: read xf
        + 2 * n * f  # xf - mean: read xf, write centered
        + 2 * n * f  # centered * centered: read, write
        + n * f  # mean of squares: read
        + 4 * rows * f  # var + eps, rsqrt: per-row vectors, read and write each
        + 2 * n * f  # * rstd: read centered, write
        + 2 * n * f  # * weight: read, write
        + hidden * size  # read weight
        + 2 * n * f  # + bias: read, write
        + hidden * size  # read bias
        + 2 * rows * f  # the two mean reductions write their per-row results
    )


FAMILY = Family(
    "layernorm",
    summary="LayerNorm forward over the last dim with weight and bias; returns (y, mean, rstd)",
    sizes={
        "small": [{"rows": 512, "hidden": 1000}],
        # 64 Mi elements: 256 MiB moved in bf16, 5x the H100's 50 MB L2; a Llama-7B-like hidden size.
        "large": [{"rows": 16384, "hidden": 4096}],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
)


@FAMILY.variant(
    "eager_unfused",
    # plus the final downcast: read the fp32 y, write y (none for fp32)
    modeled_bytes=lambda p, d: (
        unfused_trip_bytes(p, d) + (0 if element_size(d) == 4 else p["rows"] * p["hidden"] * (4 + element_size(d)))
    ),
)
def eager_unfused(case):
    """mean, subtract, square, mean, rsqrt, scale, *w, +b as separate fp32 ops"""
    x, w, b = case["x"], case["weight"], case["bias"]
    return lambda: layernorm_unfused(x, w, b)


def layernorm_builtin(x, weight, bias):
    # F.layer_norm drops mean and rstd; native_layer_norm is the op it calls and that autograd
    # saves them from, so this is PyTorch's built-in doing exactly our work, no extra pass.
    y, mean, rstd = torch.native_layer_norm(x, [x.shape[-1]], weight, bias, EPS)
    return y, mean.float().view(-1), rstd.float().view(-1)


@FAMILY.variant("eager", baseline=True)
def eager(case):
    """torch.native_layer_norm: F.layer_norm's kernel, which also returns mean and rstd"""
    x, w, b = case["x"], case["weight"], case["bias"]
    return lambda: layernorm_builtin(x, w, b)


# torch.compile of each natural way to write LayerNorm, each its own row.
@FAMILY.variant("compile_unfused", kind="compile")
def compiled_unfused(case):
    """torch.compile of the unfused fp32 form"""
    x, w, b = case["x"], case["weight"], case["bias"]
    fn = torch.compile(layernorm_unfused, dynamic=False)
    return lambda: fn(x, w, b)


@FAMILY.variant("compile_builtin", kind="compile")
def compiled_builtin(case):
    """torch.compile of torch.native_layer_norm (inductor decomposes it into one fused reduction)"""
    x, w, b = case["x"], case["weight"], case["bias"]
    fn = torch.compile(layernorm_builtin, dynamic=False)
    return lambda: fn(x, w, b)


@triton.jit
def _ln_row_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, hidden, eps,
    BLOCK: tl.constexpr, GELU: tl.constexpr, MUFU: tl.constexpr, STATS: tl.constexpr, EVEN: tl.constexpr,
):  # fmt: skip
    # One program per row, the whole row in registers: x is read from HBM once and the variance
    # is an exact two-pass one (mean, then squared deviations) at no extra traffic.
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    # EVEN (hidden == BLOCK, e.g. 4096): no mask, so no per-element compares or predicated accesses.
    # evict_first: x and y stream through once; keep L2 for w and b, which every row re-reads.
    if EVEN:
        x = tl.load(x_ptr + row * hidden + offs, eviction_policy="evict_first").to(tl.float32)
    else:
        mask = offs < hidden
        x = tl.load(x_ptr + row * hidden + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    mean = tl.sum(x, axis=0) / hidden
    centered = x - mean
    if not EVEN:
        centered = tl.where(mask, centered, 0.0)  # padding lanes must not add (0 - mean)^2
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / hidden + eps)
    # w and b after the reductions: not live across them, so fewer registers and more rows per SM.
    if EVEN:
        w = tl.load(w_ptr + offs, eviction_policy="evict_last").to(tl.float32)
        b = tl.load(b_ptr + offs, eviction_policy="evict_last").to(tl.float32)
    else:
        w = tl.load(w_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
    y = centered * rstd * w + b
    if GELU:
        y = gelu_tanh(y, MUFU)  # one MUFU op an element for 16-bit y (_gelu.py)
    if EVEN:
        tl.store(y_ptr + row * hidden + offs, y.to(y_ptr.dtype.element_ty), eviction_policy="evict_first")
    else:
        tl.store(y_ptr + row * hidden + offs, y.to(y_ptr.dtype.element_ty), mask=mask, eviction_policy="evict_first")
    if STATS:
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)


@triton.jit
def _ln_looped_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, hidden, eps,
    BLOCK: tl.constexpr, GELU: tl.constexpr, MUFU: tl.constexpr, STATS: tl.constexpr,
):  # fmt: skip
    # Rows wider than a register tile: tile by tile, each tile's exact mean and squared deviations
    # are merged into the running ones with Chan's parallel formula (stable for any |mean|/std),
    # then a second pass normalizes. The second read of x is the price of unbounded width.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * hidden
    count = 0.0
    mean = 0.0
    m2 = 0.0
    for start in range(0, hidden, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < hidden
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        tile_count = tl.minimum(hidden - start, BLOCK).to(tl.float32)
        tile_mean = tl.sum(x, axis=0) / tile_count
        d = tl.where(mask, x - tile_mean, 0.0)
        tile_m2 = tl.sum(d * d, axis=0)
        total = count + tile_count
        delta = tile_mean - mean
        mean += delta * (tile_count / total)
        m2 += tile_m2 + delta * delta * (count * tile_count / total)
        count = total
    rstd = 1.0 / tl.sqrt(m2 / hidden + eps)
    for start in range(0, hidden, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < hidden
        x = tl.load(x_row + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        if GELU:
            y = gelu_tanh(y, MUFU)  # one MUFU op an element for 16-bit y (_gelu.py)
        tl.store(y_ptr + row * hidden + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    if STATS:
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)


def triton_layernorm(
    x, weight, bias, y, mean=None, rstd=None, *, gelu=False, num_warps=None, max_block=None, eps: float = EPS,
    mufu=None,
):  # fmt: skip
    """Launch one Triton kernel; mean/rstd None skips writing them. Returns y. ``eps``: the
    model's own (GPT-2 1e-5; Llama-style models 1e-6), the family's EPS by default. ``mufu``: the
    GELU's form (_gelu.py), by default the one-MUFU form for 16-bit y on a GPU."""
    rows, hidden = x.shape
    stats = mean is not None
    block = max(triton.next_power_of_2(hidden), 32)  # at least a warp's width: tiny tiles gain nothing
    limit = max_block or MAX_FUSED_BLOCK
    mufu = gelu and (mufu_form(y.dtype) if mufu is None else mufu)
    args = (x, weight, bias, y, mean if stats else y, rstd if stats else y, hidden, float(eps))
    if block <= limit:
        # ~16 elements a thread: enough loads in flight, few enough registers that several rows share
        # an SM and one row's reduction hides behind another's loads. The GELU epilogue once took 32
        # (2% faster at 4096 with the tl.exp epilogue; docs/perf-notes/reduce-layernorm.md); with the
        # one-MUFU form, 16 measured 1.008x on an H100 and 1.022x on an H200 (memory_knobs.py, round 16).
        warps = num_warps or min(16, max(1, block // 512))
        even = block == hidden
        _ln_row_kernel[(rows,)](*args, BLOCK=block, GELU=gelu, MUFU=mufu, STATS=stats, EVEN=even, num_warps=warps)
    else:
        _ln_looped_kernel[(rows,)](*args, BLOCK=limit, GELU=gelu, MUFU=mufu, STATS=stats, num_warps=num_warps or 16)
    return y


def cuda_layernorm(library, x, weight, bias, y, mean=None, rstd=None, *, gelu=False, threads=0, eps: float = EPS):
    """Launch the CUDA kernel (kernels/layernorm.cu); threads 0 picks its default. Returns y."""
    rows, hidden = x.shape
    stats = mean is not None
    mean_buf, rstd_buf = (mean, rstd) if stats else (y, y)  # never written when stats is off
    library.launch(
        "rooflint_layernorm",
        x,
        weight,
        bias,
        y,
        mean_buf,
        rstd_buf,
        rows,
        hidden,
        threads,
        gelu,
        stats,
        cuda_dtype(x.dtype),
        float(eps),
    )
    return y


def _outputs(x):
    rows = x.shape[0]
    stats = [torch.empty(rows, dtype=torch.float32, device=x.device) for _ in range(2)]
    return torch.empty_like(x), *stats


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case):
    """one Triton program per row, the row in registers (looped for wide rows)"""
    x, w, b = case["x"].contiguous(), case["weight"], case["bias"]
    y, mean, rstd = _outputs(x)
    return lambda: (triton_layernorm(x, w, b, y, mean, rstd), mean, rstd)


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC))
def cuda_variant(case):
    """CUDA C++, one block per row, row in registers as 16-byte vectors, warp-shuffle reductions"""
    library = cuda_build.load(cuda_build.family_source(__file__))
    x, w, b = case["x"].contiguous(), case["weight"], case["bias"]
    y, mean, rstd = _outputs(x)
    return lambda: (cuda_layernorm(library, x, w, b, y, mean, rstd), mean, rstd)
