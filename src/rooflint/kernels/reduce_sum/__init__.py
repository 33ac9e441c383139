"""reduce_sum: fp32 sums of each row of x [rows, cols]; rows=1 is the sum of one long vector.

A pure read stream: every input byte is read once and almost nothing is written, so the wall is
HBM read bandwidth. The hard part is parallelism, not arithmetic: one long row must be split across
the whole GPU and the per-split partial sums combined, in one pass and deterministically.
"""

from __future__ import annotations

import torch

from rooflint.core.family import Cost, Family, element_size, randn


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


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def plan_splits(rows: int, cols: int, per_program: int, programs_wanted: int) -> tuple[int, int]:
    """(splits per row, elements per split): enough programs to fill the GPU, each a multiple of
    per_program elements so every split but the last covers whole, aligned tiles."""
    tiles = _cdiv(cols, per_program)
    splits = max(1, min(tiles, _cdiv(programs_wanted, rows)))
    chunk = _cdiv(tiles, splits) * per_program
    return _cdiv(cols, chunk), chunk


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.reduce_sum import cuda, triton  # noqa: E402, F401
