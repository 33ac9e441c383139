"""Kernel families, one module each, installed as ``rooflint.kernels``.

Each module defines ``FAMILY`` (a rooflint.family.Family) with its variants; a CUDA source,
where there is one, sits beside it as ``<family>.cu``. Add a family by adding its module name here.
"""

FAMILY_NAMES = (
    "vector_add",
    "gelu",
    "softmax",
    "attention",
    "layernorm_backward",
    "decode_attention",
    "gelu_linear",
    "reduce_sum",
    "layernorm",
    "layernorm_gelu",
    "rope",
    "kv_cache",
)


def cuda_dtype(dtype) -> int:
    """The dtype code that kernels/common.cuh's ROOFLINT_DISPATCH expects."""
    import torch

    codes = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
    if dtype not in codes:
        raise ValueError(f"CUDA sources take fp32, fp16 or bf16, not {dtype}")
    return codes[dtype]
