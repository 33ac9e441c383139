import pytest
from kernel_checks import assert_variant_matches_reference

from rooflint.core.family import Cost
from rooflint.core.registry import get_family


@pytest.mark.parametrize("n", [1, 1000, 4097, 65537])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_triton_add_matches_reference(n, dtype):
    assert_variant_matches_reference("vector_add", "triton", {"n": n}, dtype)


def test_cost_counts_two_reads_one_write():
    assert get_family("vector_add").cost({"n": 1000}, "bf16") == Cost(cuda_flops=1000, bytes=6000)
    assert get_family("vector_add").cost({"n": 10}, "fp32").bytes == 120
