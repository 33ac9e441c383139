"""layernorm: triton implementation."""

from __future__ import annotations

from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import tl, triton
from rooflint.kernels.common.gelu_tanh import gelu_tanh, mufu_form
from rooflint.kernels.layernorm import EPS, FAMILY, MAX_FUSED_BLOCK, _outputs


@triton.jit
def _ln_row_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, hidden, eps,
    BLOCK: tl.constexpr, GELU: tl.constexpr, MUFU: tl.constexpr, STATS: tl.constexpr, EVEN: tl.constexpr,
    W_FIRST: tl.constexpr = False, EVICT: tl.constexpr = False,
):  # fmt: skip
    # One program per row, the whole row in registers: x is read from HBM once and the variance
    # is an exact two-pass one (mean, then squared deviations) at no extra traffic.
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    # EVEN (hidden == BLOCK, e.g. 4096): no mask, so no per-element compares or predicated accesses.
    # EVICT: x and y marked evict_first (they stream through once), w and b evict_last.
    stream: tl.constexpr = "evict_first" if EVICT else ""
    keep: tl.constexpr = "evict_last" if EVICT else ""
    mask = offs < hidden
    if W_FIRST:  # w's and b's L2 round trips under x's instead of after the reductions
        w = tl.load(w_ptr + offs, mask=None if EVEN else mask, other=None if EVEN else 0.0).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=None if EVEN else mask, other=None if EVEN else 0.0).to(tl.float32)
    if EVEN:
        x = tl.load(x_ptr + row * hidden + offs, eviction_policy=stream).to(tl.float32)
    else:
        x = tl.load(x_ptr + row * hidden + offs, mask=mask, other=0.0, eviction_policy=stream).to(tl.float32)
    mean = tl.sum(x, axis=0) / hidden
    centered = x - mean
    if not EVEN:
        centered = tl.where(mask, centered, 0.0)  # padding lanes must not add (0 - mean)^2
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / hidden + eps)
    # Otherwise w and b after the reductions: not live across them, so fewer registers a row.
    if not W_FIRST:
        if EVEN:
            w = tl.load(w_ptr + offs, eviction_policy=keep).to(tl.float32)
            b = tl.load(b_ptr + offs, eviction_policy=keep).to(tl.float32)
        else:
            w = tl.load(w_ptr + offs, mask=mask, other=0.0, eviction_policy=keep).to(tl.float32)
            b = tl.load(b_ptr + offs, mask=mask, other=0.0, eviction_policy=keep).to(tl.float32)
    y = centered * rstd * w + b
    if GELU:
        y = gelu_tanh(y, MUFU)  # one MUFU op an element for 16-bit y (common/gelu_tanh.py)
    if EVEN:
        tl.store(y_ptr + row * hidden + offs, y.to(y_ptr.dtype.element_ty), eviction_policy=stream)
    else:
        tl.store(y_ptr + row * hidden + offs, y.to(y_ptr.dtype.element_ty), mask=mask, eviction_policy=stream)
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
            y = gelu_tanh(y, MUFU)  # one MUFU op an element for 16-bit y (common/gelu_tanh.py)
        tl.store(y_ptr + row * hidden + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    if STATS:
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)


# What `rooflint ab --config` may set on the one-row kernel (rooflint.engine.ab.configs); None: the default.
ROW_CONFIG = {"W_FIRST": None, "EVICT": None, "num_warps": None}


def triton_layernorm(
    x, weight, bias, y, mean=None, rstd=None, *, gelu=False, num_warps=None, max_block=None, eps: float = EPS,
    mufu=None, config: dict | None = None,
):  # fmt: skip
    """Launch one Triton kernel; mean/rstd None skips writing them. Returns y. ``eps``: the
    model's own (GPT-2 1e-5; Llama-style models 1e-6), the family's EPS by default. ``mufu``: the
    GELU's form (common/gelu_tanh.py), by default the one-MUFU form for 16-bit y on a GPU."""
    rows, hidden = x.shape
    stats = mean is not None
    block = max(triton.next_power_of_2(hidden), 32)  # at least a warp's width: tiny tiles gain nothing
    limit = max_block or MAX_FUSED_BLOCK
    mufu = gelu and (mufu_form(y.dtype) if mufu is None else mufu)
    args = (x, weight, bias, y, mean if stats else y, rstd if stats else y, hidden, float(eps))
    if block <= limit:
        # ~16 elements a thread: enough loads in flight, few enough registers that several rows share
        # an SM and one row's reduction hides behind another's loads. With the one-MUFU GELU form the
        # epilogue is short enough that the GELU variant takes the same 16.
        given = {name: value for name, value in (config or {}).items() if value is not None}
        warps = given.get("num_warps") or num_warps or min(16, max(1, block // 512))
        even = block == hidden
        # No eviction hints, w and b after the reductions: each alternative measured slower on an H200
        # (docs/perf-notes/layernorm.md; `rooflint ab layernorm -V triton --config EVICT=0,1`).
        meta = {"W_FIRST": bool(given.get("W_FIRST", False)), "EVICT": bool(given.get("EVICT", False))}
        _ln_row_kernel[(rows,)](
            *args, BLOCK=block, GELU=gelu, MUFU=mufu, STATS=stats, EVEN=even, num_warps=warps, **meta
        )
    else:
        _ln_looped_kernel[(rows,)](*args, BLOCK=limit, GELU=gelu, MUFU=mufu, STATS=stats, num_warps=num_warps or 16)
    return y


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case, config=ROW_CONFIG):
    """one Triton program per row, the row in registers (looped for wide rows)"""
    x, w, b = case["x"].contiguous(), case["weight"], case["bias"]
    y, mean, rstd = _outputs(x)
    return lambda: (triton_layernorm(x, w, b, y, mean, rstd, config=config), mean, rstd)
