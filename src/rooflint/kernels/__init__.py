"""Kernel families: ``rooflint.kernels.<family>`` defines ``FAMILY``.

A family with several files is a package: its ``__init__`` holds the family (sizes, inputs, the
float64 reference, the cost model, the PyTorch variants and FAMILY) and imports its implementation
modules at its end (``triton.py``, ``cuda.py``, ``gluon.py``, ...), which register their variants on
FAMILY; its CUDA sources sit beside them (``<family>.cu``, ``<family>_hopper.cu``) and include
``rooflint/common.cuh`` from ``include/`` (on nvcc's include path, and shipped in the wheel). A
one-file family may stay a module (``layernorm_gelu.py``). rooflint.core.registry lists this package
by name, so a new family is one new package or file. ``common/`` holds what several families share;
it and ``templates/`` are not families. This module holds the two helpers every family uses.
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
