"""vector_add: c = a + b. The bandwidth wall in its purest form, and the template for a family."""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC, NEEDS_TRITON, Cost, Family, element_size, randn
from rooflint.core.triton_compat import tl, triton
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype


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


@triton.jit
def _add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    # int64 offsets: 2^31 elements and up overflow int32 indexing.
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(c_ptr + offsets, (a + b).to(c_ptr.dtype.element_ty), mask=mask)


def triton_add(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    out = torch.empty_like(a) if out is None else out
    n = a.numel()
    # 4096 elements a program: 8 warps each issue 16-byte loads, enough bytes in flight per SM.
    _add_kernel[(triton.cdiv(n, 4096),)](a, b, out, n, BLOCK=4096, num_warps=8)
    return out


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case):
    """one Triton kernel, 16-byte accesses"""
    a, b = case["a"], case["b"]
    out = torch.empty_like(a)
    return lambda: triton_add(a, b, out)


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC))
def cuda_variant(case):
    """CUDA C++, 16-byte vectors, grid-stride"""
    library = cuda_build.load(cuda_build.family_source(__file__))
    a, b = case["a"], case["b"]
    out = torch.empty_like(a)

    def run():
        library.launch("rooflint_vector_add", a, b, out, a.numel(), cuda_dtype(a.dtype))
        return out

    return run
