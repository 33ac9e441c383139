"""The shape a QKV GEMM's RoPE epilogue can take, shared by the bf16 decode GEMM
(gelu_linear/skinny_pdl.cu) and the weight-only one (weight_only_gemm/cuda.cu).

Both pair rows the same way: a block of 16 outputs holds 8 rows of one head's first half and, as its
tile rows 8-15, their rotate-half partners head_dim / 2 further, so a head must be a multiple of 16
rows, and the rotated outputs whole heads.
"""

from __future__ import annotations


def why_not_pairs(epilogue: str, rope_width: int, outputs: int, head_dim: int) -> str | None:
    """Why ``epilogue`` cannot rotate the first ``rope_width`` of ``outputs`` in heads of ``head_dim``,
    or None where it can."""
    if head_dim < 16 or head_dim % 16:
        return f"{epilogue} pairs rows in 16-row blocks: head_dim {head_dim} is not a multiple of 16"
    if rope_width % head_dim or not 0 < rope_width <= outputs:
        return f"RoPE over {rope_width} of {outputs} outputs is not a whole number of heads of {head_dim}"
    return None
