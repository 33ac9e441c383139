"""Kernel sets: which implementation each kind of op of a model runs.

A model's forward calls slots (layer_norm, linear, linear_gelu, prefill_attention, decode_attention,
...) on a kernel set. ``eager`` is PyTorch as Hugging Face runs it; ``compile`` is the same code under
torch.compile (the runner compiles the whole step); ``triton`` and ``cuda`` swap in rooflint's
kernels from rooflint.kernels where the family supports the dtype and shape, and fall back to
eager elsewhere, saying why in ``plan``. Slots no family covers (plain GEMMs, embedding, residual
adds) stay PyTorch in every set, except that the triton set runs a decode step's GEMMs on its own
weight-streaming kernel (kernels/gelu_linear/skinny.py).

``fusions(rows, decoding)`` names what a set fuses at that many rows, and the forward then calls
the fused slots under fused op names (docs/models.md): ``norm_linear`` (a layer norm in the GEMM's
prologue), ``linear_residual`` (the residual add in its epilogue) and ``kv_append`` (a decode
step's new K and V written to the cache by the QKV GEMM). With ROOFLINT_PERSISTENT=1 the triton set
runs a decode step's layers as one persistent kernel, ``decoder_layers`` (models/ops/decode_layers.py:
the same fused ops as phases between grid barriers; slower than a kernel per op so far), and
``phase_shares`` then gives its phases' shares of the kernel's time, which the attribution splits
the kernel by. Eager fuses nothing: it is what Hugging Face runs.

The modules: common (the set names, SLOTS, FUSIONS and the helpers several sets share), eager (the
base every set overrides), compile, triton and cuda (one set each); make_kernel_set, here, picks one
by name. The Llama family's sets build on these in models/llama_kernels.py and
models/library_sets.py.
"""

from __future__ import annotations

import torch

from rooflint.core.errors import UserError, VariantSkipped
from rooflint.models.kernel_sets.common import ALL_SETS, KERNEL_SETS, LIBRARY_SETS, dtype_gap
from rooflint.models.kernel_sets.compile import CompileKernels
from rooflint.models.kernel_sets.cuda import CudaKernels
from rooflint.models.kernel_sets.eager import EagerKernels
from rooflint.models.kernel_sets.triton import TritonKernels

__all__ = [
    "ALL_SETS",
    "KERNEL_SETS",
    "CompileKernels",
    "CudaKernels",
    "EagerKernels",
    "TritonKernels",
    "dtype_gap",
    "make_kernel_set",
]


def make_kernel_set(name: str, dtype: torch.dtype, device: torch.device, head_dim: int, eps: float) -> EagerKernels:
    """The kernel set ``name``; raises VariantSkipped where it cannot run here."""
    classes = {"eager": EagerKernels, "compile": CompileKernels, "triton": TritonKernels, "cuda": CudaKernels}
    if name in LIBRARY_SETS:
        raise VariantSkipped(f"the {name} set runs the Llama family's ops (RMSNorm, RoPE, SwiGLU, GQA attention) only")
    if name not in classes:
        raise UserError(f"unknown kernel set {name!r}; valid: {', '.join(ALL_SETS)}")
    return classes[name](dtype, device, head_dim, eps)
