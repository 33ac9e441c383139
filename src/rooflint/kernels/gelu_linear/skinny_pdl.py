"""The decode GEMM of skinny_pdl.cu beside it: W held in registers across the PDL wait (sm_90).

kernels/gelu_linear/skinny.py calls it under programmatic dependent launch where the shape fits; its
arguments and its result are those of skinny_linear / skinny_norm_linear.
"""

from __future__ import annotations

import torch

from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype

SKINNY_PDL_CU = cuda_build.family_source(__file__, "skinny_pdl")

# k16 steps a warp holds (4 registers each), most preferred first: K = 16 * steps * warps. 12 gives
# GPT-2's K = 768 four warps of 48 W registers and K = 3072 sixteen; 16 takes K = 1024 and 4096.
STEPS = (12, 16, 10, 8, 6, 4)
MAX_WARPS = 16
# A row longer than 16 warps hold is streamed in chunks of 16 * steps * STREAM_WARPS: two buffers of
# W registers a thread, so 8 warps (a 256-thread block may use 255 registers a thread). The longest
# chunk first: 64 KB a block in flight at 16 steps, where HBM wants ~30 KB an SM.
STREAM_STEPS = (16, 8, 4)
STREAM_WARPS = 8


def steps_for(k: int, m: int) -> int:
    """The k16 steps per warp for K and M rows when one chunk holds the row; 0 where none fits."""
    least = 4 if m <= 8 else 8  # a thread per output in the epilogue: 16 x 8 or 16 x 16
    for steps in STEPS:
        if m > 8 and steps > 8:  # two X tiles: the longer shares would spill
            continue
        warps, rest = divmod(k, 16 * steps)
        if rest == 0 and least <= warps <= MAX_WARPS:
            return steps
    return 0


def plan(k: int, m: int) -> tuple[int, int]:
    """(k16 steps a warp, chunks of K) for K and M rows: the whole row in one chunk where it fits
    (steps_for), else streamed over 8 warps in two or more chunks; (0, 0) where neither divides K
    (the Triton kernel runs)."""
    steps = steps_for(k, m)
    if steps:
        return steps, 1
    for steps in STREAM_STEPS:
        if m > 8 and steps > 8:
            continue
        chunks, rest = divmod(k, 16 * steps * STREAM_WARPS)
        if rest == 0 and chunks >= 2:
            return steps, chunks
    return 0, 0


def fits(x: torch.Tensor, w: torch.Tensor, residual, out: torch.Tensor) -> bool:
    """Whether the CUDA kernel takes this call: fp16/bf16, a K it splits over whole warps (plan), and
    16-byte aligned X and W rows (its loads are 16-byte vectors)."""
    if x.dtype not in (torch.float16, torch.bfloat16) or w.dtype != x.dtype or out.dtype != x.dtype:
        return False
    if residual is not None and residual.dtype != x.dtype:
        return False
    if cuda_build.nvcc_path() is None:  # built on first use: without nvcc the Triton kernel runs
        return False
    m, k = x.shape
    aligned = x.data_ptr() % 16 == 0 and w.data_ptr() % 16 == 0 and x.stride(0) % 8 == 0
    return aligned and plan(k, m)[0] > 0


def launch(x, w, b, gelu, residual, out, norm, append) -> torch.Tensor:
    m, k = x.shape
    n = w.shape[0]
    c1, c2, eps = norm if norm is not None else (None, None, 0.0)
    library = cuda_build.load(SKINNY_PDL_CU)
    kv = append
    steps, chunks = plan(k, m)
    library.launch(
        "rooflint_skinny_pdl", x, w, b, residual, out, c1, c2,
        kv.slots if kv else None, kv.k_rows if kv else None, kv.v_rows if kv else None,
        m, n, k, x.stride(0), residual.stride(0) if residual is not None else 0, out.stride(0),
        kv.start if kv else 0, kv.heads * kv.head_dim if kv else 0, kv.heads if kv else 0, kv.head_dim if kv else 0,
        steps, chunks, int(gelu), 1, float(eps), cuda_dtype(x.dtype),
    )  # fmt: skip
    return out
