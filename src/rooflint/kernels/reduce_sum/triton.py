"""reduce_sum: triton implementation."""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import tl, triton
from rooflint.kernels import sm_count
from rooflint.kernels.common.arrival import last_to_arrive, rearm
from rooflint.kernels.reduce_sum import FAMILY, INTERPRETER_SMS, plan_splits


@triton.jit
def _row_sum_kernel(
    x_ptr, partial_ptr, count_ptr, out_ptr, cols, splits, BLOCK: tl.constexpr, SPLITS_POW2: tl.constexpr
):
    row = tl.program_id(0)
    split = tl.program_id(1)
    row_ptr = x_ptr + row.to(tl.int64) * cols
    offs = tl.arange(0, BLOCK)
    # A vector accumulator: each lane adds its own elements, so the loop body is loads and
    # independent adds; the one cross-lane tree reduction happens once, after the loop.
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    # Tiles are dealt round-robin (tile = split + i * splits): the programs in flight all read
    # one sliding window of memory, as the rows of a matrix would, instead of hundreds of
    # streams megabytes apart, which costs DRAM row-buffer locality. Full tiles load unmasked,
    # with one scalar pointer bump per tile and no per-element index or compare.
    full = cols // BLOCK
    ptr = row_ptr + split.to(tl.int64) * BLOCK + offs
    for _ in range(0, (full - split + splits - 1) // splits):
        # evict_first: the stream is read once, keep it from displacing anything in L2.
        acc += tl.load(ptr, eviction_policy="evict_first").to(tl.float32)
        ptr += splits * BLOCK  # int32 is enough: splits * BLOCK is a few million at most
    if split == full % splits:  # the partial last tile, if any, belongs to the next program in turn
        idx = full * BLOCK + offs
        acc += tl.load(row_ptr + idx, mask=idx < cols, other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=0)
    if SPLITS_POW2 == 1:
        tl.store(out_ptr + row, total)
    else:
        # Last-program-done (kernels/common/arrival.py): the last program of the row sums the partials
        # in split order, so the result is bitwise reproducible (fp32 atomics onto out would be one
        # pass too, but their order changes run to run).
        tl.store(partial_ptr + row * splits + split, total)
        if last_to_arrive(count_ptr, row, splits):
            slots = tl.arange(0, SPLITS_POW2)
            partials = tl.load(partial_ptr + row * splits + slots, mask=slots < splits, other=0.0, cache_modifier=".cg")
            tl.store(out_ptr + row, tl.sum(partials, axis=0))
            rearm(count_ptr, row)


class RowSum:
    """Preallocated workspace for one input shape; calling it launches one Triton kernel."""

    def __init__(self, x: torch.Tensor, block: int = 8192, num_warps: int = 16, programs_per_sm: int = 4) -> None:
        rows, cols = x.shape
        self.x, self.block, self.num_warps = x, block, num_warps
        self.splits, _ = plan_splits(rows, cols, block, sm_count(x.device, INTERPRETER_SMS) * programs_per_sm)
        self.out = torch.empty(rows, dtype=torch.float32, device=x.device)
        self.partials = torch.empty(rows * self.splits, dtype=torch.float32, device=x.device)
        self.counts = torch.zeros(rows, dtype=torch.int32, device=x.device)

    def __call__(self) -> torch.Tensor:
        rows = self.x.shape[0]
        _row_sum_kernel[(rows, self.splits)](
            self.x,
            self.partials,
            self.counts,
            self.out,
            self.x.shape[1],
            self.splits,
            BLOCK=self.block,
            SPLITS_POW2=triton.next_power_of_2(self.splits),
            num_warps=self.num_warps,
        )
        return self.out


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case):
    """one Triton pass, last-program-done combine (deterministic)"""
    return RowSum(case["x"].contiguous())
