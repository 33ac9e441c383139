"""GPU tier: every CUDA and every Triton variant of every family agrees with the float64 reference,
in every dtype. The Triton kernels' CPU tests run them in the interpreter, which runs no PTX: here
the GPU-only paths (tanh.approx GELU for 16-bit data, TMA, wgmma) are checked."""

from __future__ import annotations

import pytest
import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import family_names, get_family
from rooflint.engine.correctness import check
from rooflint.engine.worker import missing_requirement

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kind", ["cuda", "triton"])
@pytest.mark.parametrize("family_name", family_names())
def test_every_compiled_variant_matches_float64(family_name, kind):
    family = get_family(family_name)
    variants = [v for v in family.ordered_variants() if v.kind == kind]
    if not variants:
        pytest.skip(f"{family_name} has no {kind} variant")
    missing = missing_requirement(variants[0], "cuda")
    if missing:
        pytest.skip(f"{family_name}: {missing}")
    checked, failures = 0, []
    for size, params in family.cases("small"):
        for dtype in family.dtypes:
            case = family.build_case(size, params, dtype, torch.device("cuda"))
            with torch.no_grad():
                reference = family.reference(case.inputs, params)
            for variant in variants:
                if variant.dtypes and dtype not in variant.dtypes:
                    continue
                where = f"{family_name}/{variant.name}/{dtype}/{params}"
                try:
                    output = variant.build(case)()
                    torch.cuda.synchronize()
                except VariantSkipped as skipped:
                    print(f"{where}: skipped by the variant: {skipped}")
                    continue
                verdict = check(family, dtype, output, reference)
                checked += 1
                print(f"{where}: relative error {verdict.error:.3g} (tolerance {verdict.tolerance:.3g})")
                if not verdict.passed:
                    failures.append(f"{where}: {verdict.message}")
    assert checked > 0, f"no {kind} variant of {family_name} ran"
    assert not failures, "\n".join(failures)
