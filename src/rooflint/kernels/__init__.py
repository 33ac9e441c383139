"""Kernel families, one module each: ``rooflint.kernels.<family>`` defines ``FAMILY``.

Every public module here is a built-in family (rooflint.core.registry lists this package), so a new
family is one new file; its CUDA source, if any, sits beside it as ``<family>.cu`` and includes
``rooflint/common.cuh`` from ``include/`` (on nvcc's include path, and shipped in the wheel).
"""


def sm_count(device, on_cpu: int) -> int:
    """The GPU's multiprocessor count, which kernels size their grids by. ``on_cpu`` stands in under
    Triton's CPU interpreter: each caller picks a count that still exercises its multi-program path."""
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else on_cpu


def cuda_dtype(dtype) -> int:
    """The dtype code that include/rooflint/common.cuh's ROOFLINT_DISPATCH expects."""
    import torch

    codes = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
    if dtype not in codes:
        raise ValueError(f"CUDA sources take fp32, fp16 or bf16, not {dtype}")
    return codes[dtype]
