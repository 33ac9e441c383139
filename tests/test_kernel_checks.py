"""The shared float64 check the GPU tier's kernel tests call (tests/kernel_checks.py), run here on the
CPU with a PyTorch expression, so a check that could not fail would show without a GPU."""

from __future__ import annotations

import pytest
from kernel_checks import assert_matches_float64


def test_the_shared_check_passes_a_right_output_and_fails_a_wrong_one():
    params = {"n": 1000}
    assert_matches_float64("vector_add", "a+b", params, lambda case: case["a"] + case["b"], seed=1, device="cpu")
    with pytest.raises(AssertionError, match="vector_add a-b bf16"):
        assert_matches_float64("vector_add", "a-b", params, lambda case: case["a"] - case["b"], seed=1, device="cpu")
