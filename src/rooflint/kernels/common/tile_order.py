"""What gelu_linear's and scaled_gemm's persistent Triton GEMMs share: the order they walk their
output tiles in, and the TMA descriptors they are launched with."""

from __future__ import annotations

from rooflint.core.triton_compat import interpreting, tl, triton


@triton.jit
def tile_origin(tile, tiles_m, tiles_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    # Grouped order: consecutive tiles sweep GROUP_M tile rows per W panel, so the panel is
    # re-read from L2 rather than HBM.
    width = GROUP_M * tiles_n
    first_m = (tile // width) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    return (first_m + (tile % width) % rows) * BLOCK_M, ((tile % width) // rows) * BLOCK_N


def autotuned_descriptors(*tensors):
    """TMA descriptors for an autotuned kernel's operands, built before its config is chosen: the
    [16, 16] tile shape (with 1s in front for a higher rank) is a placeholder that each config's
    pre_hook overwrites before its launch."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    return tuple(TensorDescriptor.from_tensor(t, [1] * (t.dim() - 2) + [16, 16]) for t in tensors)


# A persistent GEMM's winner as gemm_configs reads it: (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps,
# GROUP_M, PERSISTENT).
PERSISTENT_TILE = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps", "GROUP_M", "PERSISTENT")


def gemm_configs(names, winners, pre_hook, interpreter_tile):
    """The autotuner's configs of a TMA GEMM: one per winner, a tuple of values in the order of
    ``names`` (meta-parameters, and Triton's num_warps and num_stages), each stamping its tile on the
    descriptors through ``pre_hook``. Under the CPU interpreter, which runs every program in numpy,
    the one small ``interpreter_tile`` (4 warps, 1 stage) instead, which keeps tests fast."""
    if interpreting():
        return [triton.Config(interpreter_tile, num_warps=4, num_stages=1, pre_hook=pre_hook)]
    configs = []
    for values in winners:
        meta = dict(zip(names, values, strict=True))
        warps, stages = meta.pop("num_warps"), meta.pop("num_stages")
        configs.append(triton.Config(meta, num_warps=warps, num_stages=stages, pre_hook=pre_hook))
    return configs


def persistent_grid(m: int, n: int, sms: int):
    """The launch grid of a TMA GEMM over an [m, n] output: one program an SM striding over the tiles
    where the config is persistent (PERSISTENT, true where the kernel has no such parameter), else
    one program a tile."""

    def grid(meta):
        tiles = triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"])
        return (min(tiles, sms) if meta.get("PERSISTENT", True) else tiles,)

    return grid
