"""swiglu, projected form: one persistent TMA GEMM whose epilogue writes silu(x W_gateᵀ) * (x W_upᵀ).

The unfused form writes gate and up ([rows, 2 * inter], 16-bit) from the GEMM and reads them back in
an elementwise kernel: at Llama-3-8B's 8192 x 14336 that is 704 MB of HBM traffic beside a 1.9
TFLOP GEMM, about 0.16 ms on an H200. Here each program owns an output tile [BLOCK_M, BLOCK_N] and
one accumulator twice as wide: gate's BLOCK_N columns beside up's, fed by the same X tile each K
step, so neither half ever leaves the SM. The GEMM has the shape of a 128 x 256 tile, and the output
it writes is half as wide.

Gate and up are rounded to the input dtype before the activation, as the GEMM's output is in the
unfused form, and the activation is the elementwise kernel's own (`triton._silu_mul`), so both forms
round alike. TMA (host tensor descriptors) needs sm_90 or newer; the variant is skipped elsewhere.
"""

from __future__ import annotations

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import interpreting, tl, triton
from rooflint.kernels import sm_count
from rooflint.kernels.common import autotune_picks
from rooflint.kernels.common.tile_order import (
    PERSISTENT_TILE,
    autotuned_descriptors,
    gemm_configs,
    persistent_grid,
    tile_origin,
)
from rooflint.kernels.gelu_linear.tiles import INTERPRETER_SMS, dot_wt
from rooflint.kernels.swiglu import FAMILY
from rooflint.kernels.swiglu.triton import _silu_mul

# fp32 would run the tensor cores in TF32 (a 10-bit mantissa): only the 16-bit types.
DTYPES = ("fp16", "bf16")


def _set_tma_blocks(nargs):
    # The descriptors are built before the config is chosen; each config stamps its tile on them.
    nargs["x_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_K"]]
    nargs["w_desc"].block_shape = [2, nargs["BLOCK_N"], nargs["BLOCK_K"]]
    nargs["y_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_N"]]


def _configs():
    # gelu_linear's 128 x 256 winner with its 256 columns split into gate's 128 and up's 128: 3
    # stages of 48 KB (X and the stacked gate and up slabs) and a 32 KB output tile, one block an SM,
    # 8 warps holding the 128 x 256 fp32 accumulator (128 registers a thread). The 128 x (2 x 64)
    # tile is the fallback where M or N leave the big tile's last wave mostly empty.
    winners = [(128, 128, 64, 3, 8, 16, True), (128, 64, 64, 4, 8, 8, False)]
    interpreter_tile = {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 4, "PERSISTENT": True}
    return gemm_configs(PERSISTENT_TILE, winners, _set_tma_blocks, interpreter_tile)


@triton.autotune(configs=_configs(), key=["M", "N", "K"])
@triton.jit
def _gemm_swiglu_kernel(
    x_desc,
    w_desc,
    y_desc,
    b_ptr,
    M,
    N,
    K,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    PERSISTENT: tl.constexpr,  # read by the launcher's grid: one program per SM, or per tile
    UPCAST: tl.constexpr,  # set exactly when the CPU interpreter runs the kernel
):
    # Persistent, the tile loop is flattened into the K loop so the next tile's TMA loads are issued
    # while this tile's epilogue runs (as gelu_linear's GEMM).
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0), flatten=True):
        off_m, off_n = tile_origin(tile, tiles_m, tiles_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, 2 * BLOCK_N), dtype=tl.float32)
        for kt in range(k_tiles):
            # W as [2, N, K]: one TMA copy brings gate's BLOCK_N rows and up's, stacked, so one MMA
            # chain of 2 x BLOCK_N columns takes both (two dots on the same X tile, one per half,
            # ran 1.3x slower on an H200). The unit zero-fills reads past M, past N on either half
            # and past K, so edge tiles need no masks.
            a = x_desc.load([off_m, kt * BLOCK_K])
            b = w_desc.load([0, off_n, kt * BLOCK_K]).reshape(2 * BLOCK_N, BLOCK_K)
            acc = dot_wt(a, b, acc, UPCAST)
        gate, up = acc.reshape(BLOCK_M, 2, BLOCK_N).permute(0, 2, 1).split()
        if HAS_BIAS:
            cols = off_n + tl.arange(0, BLOCK_N)
            gate += tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
            up += tl.load(b_ptr + N + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        dtype = y_desc.dtype
        y_desc.store([off_m, off_n], _silu_mul(gate.to(dtype), up.to(dtype)).to(dtype))


def why_not_weight(w: torch.Tensor) -> str | None:
    """Why the fused GEMM cannot take W [2 * inter, hidden] whatever x is, or None."""
    if w.dtype not in (torch.float16, torch.bfloat16):
        return f"16-bit weights only (got {w.dtype}): fp32 would run in TF32"
    if w.shape[1] % 8 or w.shape[0] % 16:
        return "TMA needs 16-byte row strides: hidden and inter multiples of 8"
    if w.is_cuda and torch.cuda.get_device_capability(w.device) < (9, 0):
        return "TMA needs sm_90 or newer"
    return None


def why_not(x: torch.Tensor, w: torch.Tensor) -> str | None:
    """Why the fused GEMM cannot take x [rows, hidden] and W [2 * inter, hidden], or None."""
    if x.dtype != w.dtype or x.shape[1] != w.shape[1]:
        return f"x {list(x.shape)} {x.dtype} does not match the weight {list(w.shape)} {w.dtype}"
    return why_not_weight(w)


def tiles() -> list[dict]:
    """The autotuner's tiles, each as a config gemm_swiglu takes (the GPU tier forces each)."""
    return [dict(c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages) for c in _gemm_swiglu_kernel.configs]


# What `rooflint ab --config` may set (rooflint.engine.ab.configs); None everywhere: the autotuner
# picks between the winners, else the first winner with the given values laid over it.
GEMM_CONFIG = {"BLOCK_M": None, "BLOCK_N": None, "BLOCK_K": None, "GROUP_M": None, "PERSISTENT": None,
               "num_warps": None, "num_stages": None}  # fmt: skip


def gemm_swiglu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, out: torch.Tensor | None = None,
                config: dict | None = None):  # fmt: skip
    """silu(x W_gateᵀ + b_gate) * (x W_upᵀ + b_up), [rows, inter], W = [W_gate; W_up] as vLLM's
    gate_up_proj stores it (gate's rows first) and b likewise. ``config``: GEMM_CONFIG's names."""
    why = why_not(x, w)
    if why is not None:
        raise ValueError(why)
    m, k = x.shape
    n = w.shape[0] // 2
    x, w = x.contiguous(), w.contiguous()
    out = torch.empty((m, n), dtype=x.dtype, device=x.device) if out is None else out
    x_desc, w_desc, y_desc = autotuned_descriptors(x, w.view(2, n, k), out)
    sms = sm_count(x.device, INTERPRETER_SMS)

    grid = persistent_grid(m, n, sms)

    bias = b.contiguous() if b is not None else out  # a placeholder pointer the kernel never reads
    args = (x_desc, w_desc, y_desc, bias, m, n, k)
    given = {name: value for name, value in (config or {}).items() if value is not None}
    if not given:
        autotune_picks.launch(_gemm_swiglu_kernel, grid, x.device, *args, HAS_BIAS=b is not None,
                              UPCAST=interpreting())  # fmt: skip
        return out
    first = _gemm_swiglu_kernel.configs[0]
    meta = {**first.kwargs, "num_warps": first.num_warps, "num_stages": first.num_stages, **given}
    meta["PERSISTENT"] = bool(meta["PERSISTENT"])
    _set_tma_blocks({"x_desc": x_desc, "w_desc": w_desc, "y_desc": y_desc, **meta})
    _gemm_swiglu_kernel.fn[grid(meta)](*args, HAS_BIAS=b is not None, UPCAST=interpreting(), **meta)
    return out


@FAMILY.variant("triton_gemm", kind="triton", needs=(NEEDS_CUDA, NEEDS_TRITON), dtypes=DTYPES)
def triton_gemm_variant(case, config=GEMM_CONFIG):
    """one persistent TMA GEMM, silu(gate) * up in its epilogue: gate and up never reach HBM"""
    if not case.params["hidden"]:
        raise VariantSkipped("the elementwise form has no projection to fuse into (`triton` runs it)")
    x, w = case["x"], case["weight"]
    why = why_not(x, w)
    if why is not None:
        raise VariantSkipped(why)
    out = torch.empty((x.shape[0], w.shape[0] // 2), dtype=x.dtype, device=x.device)
    return lambda: gemm_swiglu(x, w, out=out, config=config)
