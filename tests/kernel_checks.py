"""Shared correctness check for family tests: run one variant on CPU and compare with float64."""

from __future__ import annotations

import torch

from rooflint.core.registry import get_family
from rooflint.engine.correctness import check


def assert_variant_matches_reference(family_name: str, variant: str, params: dict, dtype: str, seed: int = 0):
    family = get_family(family_name)
    case = family.build_case("custom", params, dtype, torch.device("cpu"), seed=seed)
    expected = family.reference(case.inputs, params)
    output = family.variants[variant].build(case)()
    verdict = check(family, dtype, output, expected)
    assert verdict.passed, f"{family_name}/{variant} {dtype} {params}: {verdict.message}"
    return output
