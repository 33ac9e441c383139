"""tests/triton_interpreter.py's changes to Triton's CPU interpreter leave its results as they were: a
kernel whose helpers call helpers computes the same values in every dtype, and the language is
restored after the launch."""

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _four_times_plus_one(x):
    return _twice(_twice(x)) + 1  # a helper calling a helper, twice: each call patched again before


@triton.jit
def _helper_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    # in fp32, as rooflint's kernels compute (the interpreter's bf16 arithmetic is its own)
    y = _four_times_plus_one(x.to(tl.float32))
    tl.store(out_ptr + offsets, y.to(x.dtype), mask=mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32])
def test_a_kernel_with_nested_helpers_computes_the_same_and_the_language_is_restored(dtype):
    # conftest installed both changes where Triton's functions are the ones they were written for.
    assert interpreter._patch_lang.__qualname__.startswith("patch_once_per_launch")
    assert interpreter._get_np_dtype.__qualname__.startswith("np_dtypes_looked_up_once")
    before = {name: getattr(tl, name) for name in ("load", "store", "arange", "range", "reduce")}
    x = torch.arange(37).to(dtype)  # x * 4 + 1 <= 145: exact in every dtype here
    out = torch.full_like(x, -7)
    for _ in range(2):  # the second launch starts from what the first one's restore left
        _helper_kernel[(3,)](x, out, 37, BLOCK=16)
        assert torch.equal(out, x * 4 + 1)
        assert {name: getattr(tl, name) for name in before} == before
