"""reduce_sum: cuda implementation."""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype, sm_count
from rooflint.kernels.reduce_sum import FAMILY, INTERPRETER_SMS, plan_splits

REDUCE_SUM_CU = cuda_build.family_source(__file__, "reduce_sum")


class CudaRowSum:
    """The CUDA twin of RowSum: same split plan, one launch, deterministic combine."""

    UNROLL = 4  # 16-byte loads in flight per thread before the first add (must match reduce_sum.cu)

    def __init__(self, x: torch.Tensor, threads: int = 512, blocks_per_sm: int = 4) -> None:
        self.library = cuda_build.load(REDUCE_SUM_CU)
        rows, cols = x.shape
        self.x, self.threads = x, threads
        vec = 16 // x.element_size()
        # Splits are cut in whole 16-byte vectors, UNROLL of them per thread per step.
        self.splits, self.chunk = plan_splits(
            rows, cols, threads * self.UNROLL * vec, sm_count(x.device, INTERPRETER_SMS) * blocks_per_sm
        )
        self.out = torch.empty(rows, dtype=torch.float32, device=x.device)
        self.partials = torch.empty(rows * self.splits, dtype=torch.float32, device=x.device)
        self.counts = torch.zeros(rows, dtype=torch.int32, device=x.device)

    def __call__(self) -> torch.Tensor:
        rows, cols = self.x.shape
        self.library.launch(
            "rooflint_reduce_sum",
            self.x,
            self.partials,
            self.counts,
            self.out,
            rows,
            cols,
            self.chunk,
            self.splits,
            self.threads,
            cuda_dtype(self.x.dtype),
        )
        return self.out


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC), sources=(REDUCE_SUM_CU,))
def cuda_variant(case):
    """CUDA C++, 16-byte loads x4 unrolled, warp shuffles, last-block-done combine"""
    return CudaRowSum(case["x"].contiguous())
