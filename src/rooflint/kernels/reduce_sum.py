"""reduce_sum: fp32 sums of each row of x [rows, cols]; rows=1 is the sum of one long vector.

A pure read stream: every input byte is read once and almost nothing is written, so the wall is
HBM read bandwidth. The hard part is parallelism, not arithmetic: one long row must be split across
the whole GPU and the per-split partial sums combined, in one pass and deterministically.
"""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC, NEEDS_TRITON, Cost, Family, element_size, randn
from rooflint.core.triton_compat import tl, triton
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype, sm_count
from rooflint.kernels._arrival import last_to_arrive, rearm


def make_inputs(params, dtype, device, generator):
    return {"x": randn([params["rows"], params["cols"]], dtype, device, generator)}


def reference(inputs, params):
    # float64 of a [16384, 16384] input is 2 GiB: fine on an 80 GB GPU, no chunking needed.
    return inputs["x"].double().sum(dim=-1)


def cost(params, dtype):
    rows, cols = params["rows"], params["cols"]
    return Cost(
        cuda_flops=rows * cols,  # one add per element (rows*(cols-1) strictly; the -rows is noise)
        bytes=rows * cols * element_size(dtype)  # read x
        + rows * 4,  # write the fp32 sums
    )


FAMILY = Family(
    "reduce_sum",
    summary="fp32 row sums of x [rows, cols]; rows=1 sums one long vector",
    sizes={
        "small": [{"rows": 1, "cols": 1_000_003}, {"rows": 257, "cols": 1000}],
        # 2^28 elements each: 512 MiB read in bf16, 10x the H100's 50 MB L2. The first is the
        # issue's long vector; the second has enough rows to give every SM whole rows.
        "large": [{"rows": 1, "cols": 1 << 28}, {"rows": 16384, "cols": 16384}],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
    # The output is fp32 whatever the input dtype, so the error budget is fp32 accumulation's,
    # not the input's rounding: 2^28 terms summed in a different order than float64 differ by
    # about 1e-6 of the result's norm (the sum of N(0,1) terms cancels to ~sqrt(n)). 1e-4 leaves
    # room for that yet fails any bf16/fp16 accumulator, which would be off by percent.
    tolerances={"fp32": 1e-4, "fp16": 1e-4, "bf16": 1e-4},
)

# No eager_unfused: a sum is already one PyTorch op; there is nothing to decompose into trips.


@FAMILY.variant("eager", baseline=True)
def eager(case):
    """torch.sum(dtype=float32) over the last dim"""
    x = case["x"]
    return lambda: torch.sum(x, dim=-1, dtype=torch.float32)


@FAMILY.variant("compile")
def compiled(case):
    """torch.compile of the fp32 sum"""
    x = case["x"]
    fn = torch.compile(lambda t: torch.sum(t, dim=-1, dtype=torch.float32), dynamic=False)
    return lambda: fn(x)


# Under the interpreter a few splits still exercise the cross-program combine.
INTERPRETER_SMS = 4


def plan_splits(rows: int, cols: int, per_program: int, programs_wanted: int) -> tuple[int, int]:
    """(splits per row, elements per split): enough programs to fill the GPU, each a multiple of
    per_program elements so every split but the last covers whole, aligned tiles."""
    tiles = triton.cdiv(cols, per_program)
    splits = max(1, min(tiles, triton.cdiv(programs_wanted, rows)))
    chunk = triton.cdiv(tiles, splits) * per_program
    return triton.cdiv(cols, chunk), chunk


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
        # Last-program-done (kernels/_arrival.py): the last program of the row sums the partials
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


class CudaRowSum:
    """The CUDA twin of RowSum: same split plan, one launch, deterministic combine."""

    UNROLL = 4  # 16-byte loads in flight per thread before the first add (must match reduce_sum.cu)

    def __init__(self, x: torch.Tensor, threads: int = 512, blocks_per_sm: int = 4) -> None:
        self.library = cuda_build.load(cuda_build.family_source(__file__))
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


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC))
def cuda_variant(case):
    """CUDA C++, 16-byte loads x4 unrolled, warp shuffles, last-block-done combine"""
    return CudaRowSum(case["x"].contiguous())
