"""my_family: c = a + b, as `rooflint new-family` wrote it from vector_add. Now make it your kernel.

Edit top to bottom: the inputs, the float64 reference, the cost (the FLOPs, and the fewest HBM bytes
any implementation must move), then the variants. Try it without installing anything, from this
folder:
    PYTHONPATH=. ROOFLINT_FAMILY_MODULES=my_family rooflint bench my_family --device cpu --size small
    python -m pytest test_my_family.py
To ship it in your package, register the module in its pyproject.toml (no rooflint edit needed):
    [project.entry-points."rooflint.families"]
    my_family = "yourpackage.my_family"
One file is a complete family. When it grows, make it a package as rooflint's own families are
(src/rooflint/kernels/vector_add/): my_family/__init__.py keeps everything down to the PyTorch
variants and FAMILY, and ends by importing one module per implementation (triton.py, cuda.py), each
registering its variants on FAMILY; a CUDA source my_family.cu sits beside them, and
rooflint.engine.cuda_build.family_source(__file__) finds it from __init__.py (from cuda.py:
family_source(__file__, "my_family")). A variant that loads a .cu declares it when it registers
(sources=..., at the end of this file), so bench builds it with nvcc before the first row needs it.
The entry point and ROOFLINT_FAMILY_MODULES then name the package.
"""

from __future__ import annotations

import torch

from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON, Cost, Family, element_size, randn
from rooflint.core.triton_compat import tl, triton


def make_inputs(params, dtype, device, generator):
    n = params["n"]
    # Random normal, never zeros: zeros hide outputs a kernel never wrote, and can run faster.
    return {"a": randn([n], dtype, device, generator), "b": randn([n], dtype, device, generator)}


def reference(inputs, params):
    """The answer in float64: bench checks every variant against it before timing it."""
    return inputs["a"].double() + inputs["b"].double()


def cost(params, dtype):
    n, size = params["n"], element_size(dtype)
    return Cost(
        cuda_flops=n,  # one add per element (tensor_flops= for matmul work)
        bytes=2 * n * size  # read a and b
        + n * size,  # write c
    )


FAMILY = Family(
    "my_family",
    summary="c = a + b",
    sizes={
        # small: quick on a CPU, and odd so every kernel's tail is exercised.
        "small": [{"n": 1_000_003}],
        # large: many times the GPU's L2 (50 MB on an H100), so the timer sees HBM, not cache.
        "large": [{"n": 1 << 28}],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
)


# The baseline: speedup_vs_eager divides its time by every other variant's. Exactly one per family.
@FAMILY.variant("eager", baseline=True)
def eager(case):
    """torch.add"""
    a, b = case["a"], case["b"]
    return lambda: torch.add(a, b)


# Each natural way to write the op under torch.compile is its own variant (kind="compile"), so the
# table states the compiler's best, not one spelling of it.
@FAMILY.variant("compile")
def compiled(case):
    """torch.compile(a + b)"""
    a, b = case["a"], case["b"]
    fn = torch.compile(lambda x, y: x + y, dynamic=False)
    return lambda: fn(a, b)


@triton.jit
def _my_family_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    # int64 offsets: 2^31 elements and up overflow int32 indexing.
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(c_ptr + offsets, (a + b).to(c_ptr.dtype.element_ty), mask=mask)


def triton_my_family(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    out = torch.empty_like(a) if out is None else out
    n = a.numel()
    # 4096 elements a program: 8 warps each issue 16-byte loads, enough bytes in flight per SM.
    _my_family_kernel[(triton.cdiv(n, 4096),)](a, b, out, n, BLOCK=4096, num_warps=8)
    return out


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case):
    """one Triton kernel, 16-byte accesses"""
    a, b = case["a"], case["b"]
    out = torch.empty_like(a)  # allocated once, outside the timed call
    return lambda: triton_my_family(a, b, out)


# A CUDA variant (in a package: cuda.py, with my_family.cu beside it) names the .cu it loads in
# sources=, the same path (one constant) it passes to cuda_build.load. bench starts every declared build at once,
# before the first row; a source left undeclared still builds, but on the variant's first call, while
# the GPU waits:
#
#     from rooflint.core.family import NEEDS_NVCC
#     from rooflint.engine import cuda_build
#     from rooflint.kernels import cuda_dtype
#
#     MY_FAMILY_CU = cuda_build.family_source(__file__, "my_family")
#
#     @FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC), sources=(MY_FAMILY_CU,))
#     def cuda_variant(case):
#         """CUDA C++, 16-byte vectors"""
#         library = cuda_build.load(MY_FAMILY_CU)
#         a, b = case["a"], case["b"]
#         out = torch.empty_like(a)
#         return lambda: library.launch("rooflint_my_family", a, b, out, a.numel(), cuda_dtype(a.dtype))
