"""softmax: row-wise over the last dimension of a [rows, cols] tensor.

A reduction followed by an elementwise pass: 5 FLOPs per element against 4 bytes (bf16 in and
out), so memory-bound. The floor is one read and one write per element, reached only when a
row stays on chip (registers) between finding its max and sum and writing its outputs.
"""

from __future__ import annotations

import torch

from rooflint.core.family import Cost, Family, element_size, randn


def make_inputs(params, dtype, device, generator):
    return {"x": randn([params["rows"], params["cols"]], dtype, device, generator)}


def reference(inputs, params):
    x = inputs["x"]
    out = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    # Chunks of rows keep the float64 temporaries near 1.5 GB at the large size.
    step = max(1, (1 << 26) // max(1, x.shape[1]))
    for start in range(0, x.shape[0], step):
        out[start : start + step] = torch.softmax(x[start : start + step].double(), dim=-1)
    return out


def cost(params, dtype):
    rows, cols, size = params["rows"], params["cols"], element_size(dtype)
    n = rows * cols
    return Cost(
        # per element: max compare, subtract, exp (counted as 1), sum add, divide; the one
        # reciprocal per row is left out, like the peers' count (AI 1.25 in bf16).
        cuda_flops=5 * n,
        bytes=n * size  # read x once
        + n * size,  # write y once
    )


def _unfused_bytes(params, dtype):
    rows, n, size = params["rows"], params["rows"] * params["cols"], element_size(dtype)
    return (
        n * size
        + rows * size  # amax: read x, write the row maxima
        + 2 * n * size
        + rows * size  # x - max: read x and the maxima, write
        + 2 * n * size  # exp: read, write
        + n * size
        + rows * size  # sum: read, write the row sums
        + 2 * n * size
        + rows * size  # divide: read e and the sums, write y
    )


FAMILY = Family(
    "softmax",
    summary="row-wise softmax over the last dim",
    sizes={
        "small": [{"rows": 37, "cols": 1000}],
        # 2^28 elements: 1 GiB moved in bf16, 20x the H100's 50 MB L2.
        "large": [{"rows": 16384, "cols": 16384}],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
)


def softmax_unfused(x):
    """max, subtract, exp, sum, divide: five kernels, each a full trip through HBM."""
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


@FAMILY.variant("eager_unfused", modeled_bytes=_unfused_bytes)
def eager_unfused(case):
    """amax, sub, exp, sum, div: 5 kernels"""
    x = case["x"]
    return lambda: softmax_unfused(x)


@FAMILY.variant("eager", baseline=True)
def eager(case):
    """torch.softmax"""
    x = case["x"]
    return lambda: torch.softmax(x, dim=-1)


def softmax_unfused_max(x):
    """The same math with x.max(...).values, the other way people write the row max."""
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def softmax_builtin(x):
    return torch.softmax(x, dim=-1)


# torch.compile of each natural way to write softmax, each its own row. The spelling matters: on an
# H100 inductor compiled the amax form 1.5x slower than the max().values form (0.567 vs 0.378 ms
# at the large size), so one form alone can make the compiler look weaker than it is.
@FAMILY.variant("compile_unfused", kind="compile")
def compiled_unfused(case):
    """torch.compile of the unfused form, row max by x.amax"""
    x = case["x"]
    fn = torch.compile(softmax_unfused, dynamic=False)
    return lambda: fn(x)


@FAMILY.variant("compile_max", kind="compile")
def compiled_max(case):
    """torch.compile of the unfused form, row max by x.max(...).values"""
    x = case["x"]
    fn = torch.compile(softmax_unfused_max, dynamic=False)
    return lambda: fn(x)


@FAMILY.variant("compile_builtin", kind="compile")
def compiled_builtin(case):
    """torch.compile of torch.softmax"""
    x = case["x"]
    fn = torch.compile(softmax_builtin, dynamic=False)
    return lambda: fn(x)


def _check_layout(x):
    # The kernels index rows as x + row * cols: they need a dense 2-D tensor.
    if x.dim() != 2 or not x.is_contiguous():
        raise ValueError(f"expected a contiguous 2-D tensor, got shape {tuple(x.shape)} strides {x.stride()}")


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.softmax import cuda, cuda_online, library, triton  # noqa: E402, F401
