"""What rooflint's Gluon kernels share (attention/gluon.py, gelu_linear/gluon.py): Gluon's Hopper ops,
imported once; the TMA names that moved between Triton versions; where such a kernel can run.

Gluon (`triton.experimental.gluon`, in the Triton wheel) is Triton's lower-level language: a kernel
states its layouts, shared memory, mbarriers and schedule. Its API still moves between releases.
"""

from __future__ import annotations

import torch

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    # TMA's names: async_copy_global_to_shared / async_copy_shared_to_global in Triton 3.6 (the GPU
    # image), async_load / async_store from 3.7 on, where the old load name raises (the CPU CI's
    # Triton compiles these kernels too).
    tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
    HAS_GLUON = True

    @gluon.jit
    def tile_origin(tile, tiles_m, tiles_n, group_m):
        """Tile ``tile``'s (row, column) in the grouped order common/tile_order.py gives the Triton
        GEMMs: consecutive tiles walk down ``group_m`` tile rows, then step a panel of B right, so
        the CTAs resident at once share A and B panels in L2. A Gluon kernel cannot call that
        @triton.jit function, so the order is written here once for the Gluon GEMMs."""
        width = group_m * tiles_n
        first_m = (tile // width) * group_m
        rows = gl.minimum(tiles_m - first_m, group_m)
        return first_m + (tile % width) % rows, (tile % width) // rows

except ImportError:  # no triton, or one without Gluon's Hopper ops: the variants are skipped with the reason
    HAS_GLUON = False
    # The names stay importable; nothing calls them (each kernel module defines its kernels only
    # where HAS_GLUON is true, and sm90_reason stops every launch before).
    gluon = gl = fence_async_shared = mbarrier = tma = warpgroup_mma = warpgroup_mma_wait = None
    TensorDescriptor = tma_load = tma_store = tile_origin = None

__all__ = [
    "HAS_GLUON",
    "TensorDescriptor",
    "fence_async_shared",
    "gl",
    "gluon",
    "mbarrier",
    "sm90_reason",
    "tma",
    "tma_load",
    "tma_store",
    "tile_origin",
    "warpgroup_mma",
    "warpgroup_mma_wait",
]


def sm90_reason(device: torch.device, kernel: str, dtype: torch.dtype | None) -> str | None:
    """Why the Gluon `kernel` ("attention", "GEMM"), written for sm_90 in fp16 or bf16, cannot run on
    ``device`` in ``dtype`` (None: it can). ``dtype`` None: a kernel that checks its own formats."""
    if not HAS_GLUON:
        return "needs Triton's Gluon with its Hopper ops (triton>=3.5)"
    if device.type != "cuda":
        return "Gluon has no CPU interpreter: it runs on an sm_90 GPU only"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) != (9, 0):
        return f"the Gluon {kernel} is written for sm_90 (wgmma, TMA); this GPU is sm_{major}{minor}"
    if dtype is not None and dtype not in (torch.float16, torch.bfloat16):
        return f"the Gluon {kernel} takes fp16 or bf16, not {dtype}"
    return None
