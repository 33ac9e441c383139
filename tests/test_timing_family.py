"""Timer statistics, the family model's size parsing, and the correctness gate."""

import numpy as np
import pytest
import torch

from rooflint.core.errors import UserError
from rooflint.core.registry import get_family
from rooflint.engine.correctness import relative_error
from rooflint.engine.timing import summarize, time_cpu


def test_quantiles_match_numpy():
    samples = [5.0, 1.0, 3.0, 2.0, 4.0, 10.0, 7.0]
    timing = summarize(samples, "cpu_wall", False)
    assert timing.median_ms == np.median(samples)
    assert timing.p20_ms == pytest.approx(np.quantile(samples, 0.2))
    assert timing.p80_ms == pytest.approx(np.quantile(samples, 0.8))
    assert timing.n_samples == 7


def test_cpu_timer_takes_enough_samples():
    calls = []
    timing = time_cpu(lambda: calls.append(1), warmup_ms=1, rep_ms=5)
    assert timing.n_samples >= 10 and len(calls) >= timing.n_samples + 2
    assert timing.mode == "cpu_wall" and not timing.l2_flushed


def test_custom_sizes_fill_missing_keys_from_small():
    family = get_family("vector_add")
    assert family.cases("n=17") == [("custom", {"n": 17})]
    assert family.cases("large") == [("large", {"n": 1 << 28})]
    with pytest.raises(UserError, match="unknown size key"):
        family.cases("m=3")


def test_relative_error_catches_nan_and_unwritten_blocks():
    reference = torch.randn(1000, dtype=torch.float64)
    assert relative_error(reference.float(), reference) < 1e-6
    broken = reference.clone()
    broken[:100] = 0  # a block the kernel never wrote
    assert relative_error(broken, reference) > 0.1
    broken[0] = float("nan")
    assert relative_error(broken, reference) == float("inf")


def test_inputs_are_random_never_zero():
    case = get_family("vector_add").build_case("custom", {"n": 4096}, "bf16", torch.device("cpu"))
    assert case["a"].dtype == torch.bfloat16
    assert (case["a"] != 0).float().mean() > 0.99 and not torch.equal(case["a"], case["b"])
