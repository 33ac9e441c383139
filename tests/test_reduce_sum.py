import pytest
import torch
from kernel_checks import assert_variant_matches_reference

from rooflint.core.family import Cost
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels import reduce_sum as rs
from rooflint.kernels.reduce_sum.triton import RowSum

# (1, n): one vector, split across programs; (rows, n): row sums, one or more programs per row.
# 1 << 17 is a whole number of tiles: no partial last tile.
SHAPES = [(1, 1), (1, 1000), (1, 4097), (1, 300_007), (1, 1 << 17), (3, 4097), (257, 1000)]


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_triton_matches_reference(rows, cols, dtype):
    assert_variant_matches_reference("reduce_sum", "triton", {"rows": rows, "cols": cols}, dtype)


def test_long_vector_is_split_and_combined_deterministically():
    x = rs.randn([1, 300_007], torch.bfloat16, torch.device("cpu"), torch.Generator().manual_seed(1))
    row_sum = RowSum(x, block=1024)
    assert row_sum.splits > 1  # the last-program-done combine is what runs
    first = row_sum().clone()
    second = row_sum()
    assert torch.equal(first, second)  # same partials, same order: bitwise equal
    assert int(row_sum.counts.sum()) == 0  # tickets re-armed for the next call


@pytest.mark.parametrize("rows,cols,per,wanted", [(1, 1 << 28, 4096, 1056), (16384, 16384, 4096, 1056), (3, 1, 8, 99)])
def test_split_plan_covers_each_row_once(rows, cols, per, wanted):
    splits, chunk = rs.plan_splits(rows, cols, per, wanted)
    assert chunk % per == 0
    assert (splits - 1) * chunk < cols <= splits * chunk  # no empty split, nothing left over


def test_tolerance_rejects_a_bf16_accumulator():
    family = get_family("reduce_sum")
    params = {"rows": 1, "cols": 100_000}
    case = family.build_case("custom", params, "bf16", torch.device("cpu"))
    x = case["x"][0].float() + 3.0  # a mean away from 0, as in real activations
    running = torch.zeros((), dtype=torch.bfloat16)
    for chunk in x.split(1000):  # a bf16 running sum, the mistake fp32 accumulation avoids
        running = (running + chunk.sum().to(torch.bfloat16)).to(torch.bfloat16)
    assert not check(family, "bf16", running.float().view(1), x.double().sum().view(1)).passed


@pytest.mark.parametrize("variant", ["eager"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_torch_variants_match_reference(variant, dtype):
    assert_variant_matches_reference("reduce_sum", variant, {"rows": 5, "cols": 10_001}, dtype)


def test_cost_counts():
    family = get_family("reduce_sum")
    # 2^28 bf16 elements read, one fp32 written, one add each.
    assert family.cost({"rows": 1, "cols": 1 << 28}, "bf16") == Cost(cuda_flops=1 << 28, bytes=(1 << 29) + 4)
    # 3 rows of 5 fp32: 60 bytes read, 12 written.
    assert family.cost({"rows": 3, "cols": 5}, "fp32") == Cost(cuda_flops=15, bytes=72)
