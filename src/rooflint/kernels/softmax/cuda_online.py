"""softmax: the one-reduction CUDA kernel (softmax_online.cu), the row staged in shared memory."""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype
from rooflint.kernels.softmax import FAMILY, _check_layout
from rooflint.kernels.softmax.cuda import SOFTMAX_CU, cuda_softmax

SOFTMAX_ONLINE_CU = cuda_build.family_source(__file__, "softmax_online")


def load_library():
    return cuda_build.load(SOFTMAX_ONLINE_CU)


def cuda_softmax_online(library, x, out, threads: int = 0):
    """Launch rooflint_softmax_online on rows no wider than ``widest_staged_row``; ``threads``: 0 for
    the kernel's block size (a launch sweep sets it: a multiple of 32, at most 256)."""
    _check_layout(x)
    rows, cols = x.shape
    library.launch("rooflint_softmax_online", x, out, rows, cols, cuda_dtype(x.dtype), threads)
    return out


def widest_staged_row(library, dtype: torch.dtype) -> int:
    """The widest row this GPU stages in one block's shared memory (72 KB at most: 3 rows an SM on Hopper)."""
    return library.query("rooflint_softmax_online_max_cols", cuda_dtype(dtype))


def rows_per_sm(library, cols: int, dtype: torch.dtype, threads: int = 0) -> int:
    """Blocks, hence rows in flight, resident on one SM at this width (the occupancy calculator's answer)."""
    return library.query("rooflint_softmax_online_rows_per_sm", cols, cuda_dtype(dtype), threads)


# softmax.cu too: rows wider than the shared-memory stage run its looped kernel.
@FAMILY.variant(
    "cuda_online",
    kind="cuda",
    needs=(NEEDS_CUDA, NEEDS_NVCC),
    sources=(SOFTMAX_ONLINE_CU, SOFTMAX_CU),
)
def cuda_online_variant(case):
    """CUDA C++: a block a row staged in shared memory by cp.async, one (max, sum) block merge; wider rows looped"""
    x = case["x"]
    _check_layout(x)
    library = load_library()
    out = torch.empty_like(x)
    if x.shape[1] > widest_staged_row(library, x.dtype):
        # Past the stage (over 72 KB a row): softmax.cu's online two-pass kernel, its second read mostly from L2.
        return lambda: cuda_softmax(x, out, mode="looped")
    return lambda: cuda_softmax_online(library, x, out)
