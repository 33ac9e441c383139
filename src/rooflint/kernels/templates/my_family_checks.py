"""Checks for the my_family family: every variant against its float64 reference, on the CPU.

Triton kernels run on CPU tensors through Triton's interpreter: TRITON_INTERPRET=1 is set before the
family is imported, because triton.jit reads it when a kernel is decorated.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from my_family import FAMILY  # noqa: E402

from rooflint.core.family import NEEDS_TRITON  # noqa: E402
from rooflint.core.triton_compat import HAS_TRITON  # noqa: E402

PARAMS = {"n": 4099}  # odd, so the last Triton block is partial


def relative_error(output: torch.Tensor, expected: torch.Tensor) -> float:
    """Norm-wise, as bench's check: ||output - expected|| / ||expected||."""
    return (torch.linalg.vector_norm(output.double() - expected) / torch.linalg.vector_norm(expected)).item()


@pytest.mark.parametrize("dtype", FAMILY.dtypes)
@pytest.mark.parametrize("name", sorted(FAMILY.variants))
def test_variant_matches_the_float64_reference(name, dtype):
    variant = FAMILY.variants[name]
    if NEEDS_TRITON in variant.needs and not HAS_TRITON:
        pytest.skip("needs the triton package")
    case = FAMILY.build_case("custom", PARAMS, dtype, torch.device("cpu"))
    output = variant.build(case)()
    assert relative_error(output, FAMILY.reference(case.inputs, PARAMS)) <= FAMILY.tolerances[dtype]


def test_a_wrong_answer_fails_the_check():
    # The check must be able to fail: a + 2b is off by ||b|| / ||a + b||, about 1.
    case = FAMILY.build_case("custom", PARAMS, "fp32", torch.device("cpu"))
    wrong = case["a"] + 2 * case["b"]
    assert relative_error(wrong, FAMILY.reference(case.inputs, PARAMS)) > FAMILY.tolerances["fp32"]


def test_cost_counts_each_input_read_and_output_written_once():
    cost = FAMILY.cost(PARAMS, "bf16")
    assert cost.bytes == 3 * 4099 * 2  # a and b read, c written, 2 bytes an element
    assert cost.flops == 4099


def test_the_baseline_is_declared_and_runs_first():
    assert FAMILY.baseline is FAMILY.variants["eager"] is FAMILY.ordered_variants()[0]
