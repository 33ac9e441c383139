"""What gelu_linear's and scaled_gemm's persistent Triton GEMMs share: the order they walk their
output tiles in, and the TMA descriptors they are launched with."""

from __future__ import annotations

from rooflint.core.triton_compat import tl, triton


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
