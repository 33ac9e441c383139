"""Kernel families, one module each, installed as ``rooflint.kernels``.

Each module defines ``FAMILY`` (a rooflint.family.Family) with its variants; a CUDA source,
where there is one, sits beside it as ``<family>.cu``. Add a family by adding its module name here.
"""

FAMILY_NAMES = (
    # memory-bound: elementwise, reductions, normalization, positional and cache kernels
    "vector_add",
    "gelu",
    "softmax",
    "reduce_sum",
    "layernorm",
    "layernorm_gelu",
    "layernorm_backward",
    "rope",
    "kv_cache",
    # compute-bound (decode_attention is memory-bound, but belongs with attention)
    "attention",
    "decode_attention",
    "gelu_linear",
)


def cuda_dtype(dtype) -> int:
    """The dtype code that kernels/common.cuh's ROOFLINT_DISPATCH expects."""
    import torch

    codes = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
    if dtype not in codes:
        raise ValueError(f"CUDA sources take fp32, fp16 or bf16, not {dtype}")
    return codes[dtype]
