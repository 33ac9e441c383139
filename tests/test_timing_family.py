"""Timer statistics, the family model's size parsing, and the correctness gate."""

import numpy as np
import pytest
import torch

from rooflint.core.errors import UserError
from rooflint.core.registry import get_family
from rooflint.engine import timing as timing_module
from rooflint.engine.correctness import relative_error
from rooflint.engine.settings import Regime
from rooflint.engine.timing import summarize, time_cpu


def test_quantiles_match_numpy():
    samples = [5.0, 1.0, 3.0, 2.0, 4.0, 10.0, 7.0]
    timing = summarize(samples, "cpu_wall", False)
    assert timing.median_ms == np.median(samples)
    assert timing.p20_ms == pytest.approx(np.quantile(samples, 0.2))
    assert timing.p80_ms == pytest.approx(np.quantile(samples, 0.8))
    assert timing.n_samples == 7


class FakeClock:
    """perf_counter for rooflint.engine.timing that moves only when the timed function runs: the
    first call costs 50 ms (a compile), then calls cost 2, 3, 1, 2, 3, 1, ... ms."""

    def __init__(self):
        self.now, self.calls = 0.0, 0

    def perf_counter(self):
        return self.now

    def call(self):
        self.now += (50.0 if self.calls == 0 else 1 + self.calls % 3) / 1e3
        self.calls += 1


@pytest.mark.parametrize(
    "rep_ms, samples", [(101, 50), (5, timing_module.MIN_SAMPLES), (1e7, timing_module.MAX_SAMPLES)]
)
def test_cpu_timer_sizes_its_sample_from_the_budget_and_drops_the_first_call(monkeypatch, rep_ms, samples):
    clock = FakeClock()
    monkeypatch.setattr(timing_module, "time", clock)
    timing = time_cpu(clock.call, warmup_ms=10, rep_ms=rep_ms, regime=Regime.BURST)
    # The second call (2 ms) sizes the sample: 101 ms of budget is 50 whole calls, within [MIN, MAX].
    assert timing.n_samples == samples
    # Warm-up calls ran between the two sizing calls and the n timed ones.
    assert clock.calls > 2 + samples
    # Samples cycle through 1, 2 and 3 ms; the 50 ms first call is never one of them.
    assert (timing.p20_ms, timing.median_ms, timing.p80_ms) == pytest.approx((1.0, 2.0, 3.0))


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


def test_inputs_are_seeded_random_and_never_zero():
    family = get_family("vector_add")

    def build(seed):
        return family.build_case("custom", {"n": 4096}, "bf16", torch.device("cpu"), seed=seed)

    first, again, other = build(0), build(0), build(1)
    # The same seed gives the same inputs, so every variant and every rerun sees identical data.
    assert torch.equal(first["a"], again["a"]) and torch.equal(first["b"], again["b"])
    assert not torch.equal(first["a"], other["a"])
    # Two inputs that were one tensor twice would let a kernel that reads `a` twice pass a + b.
    assert not torch.equal(first["a"], first["b"])
    # Zeros would hide a block the kernel never wrote.
    assert first["a"].dtype == torch.bfloat16 and (first["a"] != 0).float().mean() > 0.99
