"""GPU tier: the cuda_online softmax (softmax_online.cu) against float64 over odd shapes, every float
dtype, unaligned rows, every block size, masked rows, a row of -inf, and the looped fallback."""

from __future__ import annotations

import pytest
import torch

from rooflint.core.family import Case
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.softmax import cuda_online

pytestmark = pytest.mark.gpu

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def run_variant(x, variant: str = "cuda_online"):
    family = get_family("softmax")
    case = Case(family, "custom", {"rows": x.shape[0], "cols": x.shape[1]}, x.dtype, x.device, {"x": x})
    out = family.variants[variant].build(case)()
    torch.cuda.synchronize()
    return out


def assert_matches_float64(out, x, dtype: str, where: str):
    family = get_family("softmax")
    reference = family.reference({"x": x}, {"rows": x.shape[0], "cols": x.shape[1]})
    verdict = check(family, dtype, out, reference)
    print(f"{where}: relative error {verdict.error:.3g}")
    assert verdict.passed, f"{where}: {verdict.message}"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("rows", [1, 3, 1001])
def test_matches_float64_over_odd_shapes(rows, dtype):
    family = get_family("softmax")
    for cols in (1, 7, 8, 1000, 4096, 16384, 16391):
        params = {"rows": rows, "cols": cols}
        case = family.build_case("custom", params, dtype, torch.device("cuda"), seed=rows + cols)
        out = family.variants["cuda_online"].build(case)()
        torch.cuda.synchronize()
        assert_matches_float64(out, case["x"], dtype, f"cuda_online {dtype} {params}")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("x_offset,y_offset", [(1, 1), (3, 0), (0, 5)])
def test_rows_off_the_16_byte_grid(dtype, x_offset, y_offset):
    # Views a few elements into their storage: every row starts at another phase within 16 bytes,
    # and where x and y differ in phase the kernel writes element by element.
    rows, cols = 5, 1003
    x = torch.randn(rows * cols + x_offset, device="cuda").to(DTYPES[dtype])[x_offset:].view(rows, cols)
    y = torch.empty(rows * cols + y_offset, device="cuda", dtype=DTYPES[dtype])[y_offset:].view(rows, cols)
    out = cuda_online.cuda_softmax_online(cuda_online.load_library(), x, y)
    torch.cuda.synchronize()
    assert_matches_float64(out, x, dtype, f"offsets x {x_offset} y {y_offset} {dtype}")


@pytest.mark.parametrize("threads", [32, 64, 128, 256])
def test_every_block_size(threads):
    x = torch.randn(7, 16384 + 3, device="cuda").bfloat16()
    out = cuda_online.cuda_softmax_online(cuda_online.load_library(), x, torch.empty_like(x), threads=threads)
    torch.cuda.synchronize()
    assert_matches_float64(out, x, "bf16", f"{threads} threads")


def test_a_large_shift_and_masked_rows():
    # An attention-style mask: the first i+1 columns of row i kept, the rest -inf (threads whose
    # elements are all -inf must merge as empty), plus an offset of 80 that exp would overflow without the max.
    rows, cols = 64, 4096
    x = torch.randn(rows, cols, device="cuda") + 80.0
    keep = torch.arange(cols, device="cuda")[None, :] <= torch.arange(rows, device="cuda")[:, None] * 64
    x = x.masked_fill(~keep, float("-inf"))
    for dtype in DTYPES:
        xd = x.to(DTYPES[dtype])
        out = run_variant(xd)
        assert_matches_float64(out, xd, dtype, f"masked rows {dtype}")
        assert bool((out.float()[~keep] == 0).all())


def test_a_row_of_minus_infinity_gives_what_the_reference_and_the_cuda_variant_give():
    # torch's float64 softmax (the family's reference) makes a row of -inf NaN, and softmax.cu does
    # the same; the other rows stay exact.
    x = torch.randn(4, 1000, device="cuda").bfloat16()
    x[2] = float("-inf")
    out = run_variant(x)
    reference = torch.softmax(x.double(), dim=-1)
    cuda_out = run_variant(x, "cuda")
    assert torch.equal(out.isnan(), reference.isnan()) and torch.equal(out.isnan(), cuda_out.isnan())
    assert bool(out[2].isnan().all())
    keep = [0, 1, 3]
    assert_matches_float64(out[keep], x[keep], "bf16", "rows beside a row of -inf")


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_the_widest_staged_row_and_the_looped_fallback_past_it(dtype):
    library = cuda_online.load_library()
    widest = cuda_online.widest_staged_row(library, DTYPES[dtype])
    print(f"widest staged row {dtype}: {widest} columns")
    assert widest >= 16384 if dtype != "fp32" else widest >= 8192
    for cols in (widest, widest + 1):
        x = torch.randn(3, cols, device="cuda").to(DTYPES[dtype])
        assert_matches_float64(run_variant(x), x, dtype, f"{cols} columns {dtype}")


def test_three_or_more_rows_in_flight_an_sm_at_the_large_size():
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the launch is sized for Hopper's 228 KB of shared memory an SM")
    library = cuda_online.load_library()
    rows = cuda_online.rows_per_sm(library, 16384, torch.bfloat16)
    print(f"bf16 16384 columns: {rows} rows resident an SM")
    assert rows >= 3
