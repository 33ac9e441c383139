"""vector_add: c = a + b. The bandwidth wall in its purest form, and the template for a family."""

from __future__ import annotations

import torch

from rooflint.core.family import Cost, Family, element_size, randn


def make_inputs(params, dtype, device, generator):
    n = params["n"]
    return {"a": randn([n], dtype, device, generator), "b": randn([n], dtype, device, generator)}


def reference(inputs, params):
    return inputs["a"].double() + inputs["b"].double()


def cost(params, dtype):
    n, size = params["n"], element_size(dtype)
    return Cost(
        cuda_flops=n,  # one add per element
        bytes=2 * n * size  # read a and b
        + n * size,  # write c
    )


FAMILY = Family(
    "vector_add",
    summary="c = a + b",
    sizes={
        "small": [{"n": 1_000_003}],
        # 2^28 elements: 1.5 GiB moved in bf16, 32x the H100's 50 MB L2.
        "large": [{"n": 1 << 28}],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
)


@FAMILY.variant("eager", baseline=True)
def eager(case):
    """torch.add"""
    a, b = case["a"], case["b"]
    return lambda: torch.add(a, b)


@FAMILY.variant("compile")
def compiled(case):
    """torch.compile(a + b)"""
    a, b = case["a"], case["b"]
    fn = torch.compile(lambda x, y: x + y, dynamic=False)
    return lambda: fn(a, b)


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.vector_add import cuda, triton  # noqa: E402, F401
