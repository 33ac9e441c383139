"""GPU tier: every library peer (FlashAttention-4/3/2, FlashInfer, Liger-Kernel, quack) of every family
agrees with the float64 reference in every dtype it runs, through the same gate bench uses, and a
second call leaves the first call's output as it was (the engine calls again before it checks).
A peer that is not installed, or has no kernels for this GPU, is skipped with the reason and the
line that installs it."""

from __future__ import annotations

import pytest
import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import family_names, get_family
from rooflint.engine.correctness import check
from rooflint.engine.worker import missing_requirement

pytestmark = pytest.mark.gpu


def _peers():
    for name in family_names():
        for variant in get_family(name).ordered_variants():
            if variant.kind == "library":
                yield name, variant.name


# Odd sizes beside the presets: partial tiles, rows that are no power of two, a cache of no whole page.
ODD = {
    "attention": [
        {"B": 2, "H": 3, "N": 257, "D": 128, "causal": True},
        {"B": 1, "H": 2, "N": 200, "D": 64, "causal": False},
    ],
    "decode_attention": [{"b": 3, "h": 8, "h_kv": 2, "c": 1001, "d": 128}],
    "rope": [{"batch": 2, "seq": 77, "heads": 5, "head_dim": 128}],
    "layernorm": [{"rows": 37, "hidden": 4097}],
    "softmax": [{"rows": 37, "cols": 5003}],
    "rmsnorm": [{"rows": 37, "hidden": 4097, "residual": False}, {"rows": 37, "hidden": 4096, "residual": True}],
    "swiglu": [{"rows": 37, "inter": 14337, "hidden": 0}, {"rows": 300, "inter": 1000, "hidden": 512}],
    "cross_entropy": [
        {"tokens": 65, "vocab": 128256, "hidden": 0},
        {"tokens": 300, "vocab": 32000, "hidden": 512},
    ],
}


@pytest.mark.parametrize("family_name,variant_name", list(_peers()))
def test_every_library_peer_matches_float64(family_name, variant_name):
    family = get_family(family_name)
    variant = family.variants[variant_name]
    missing = missing_requirement(variant, "cuda")
    if missing:
        pytest.skip(f"{family_name}/{variant_name}: {missing}")
    cases = family.cases("small") + [("custom", params) for params in ODD.get(family_name, [])]
    checked, skipped, failures = 0, [], []
    for size, params in cases:
        for dtype in family.dtypes:
            if variant.dtypes and dtype not in variant.dtypes:
                continue
            where = f"{family_name}/{variant_name} {variant.library.name} {variant.library.version()} {dtype} {params}"
            case = family.build_case(size, params, dtype, torch.device("cuda"))
            with torch.no_grad():
                reference = family.reference(case.inputs, params)
            try:
                call = variant.build(case)
                first = call()
                call()
                torch.cuda.synchronize()
            except VariantSkipped as why:
                skipped.append(f"{where}: {why}")
                continue
            except Exception as error:  # noqa: BLE001 - each failure is reported with its case
                failures.append(f"{where}: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
                continue
            verdict = check(family, dtype, first, reference)
            print(f"{where}: relative error {verdict.error:.3g}")
            checked += 1
            if not verdict.passed:
                failures.append(f"{where}: {verdict.message}")
    print("\n".join(skipped))
    assert not failures, "\n".join(failures)
    if not checked:
        pytest.skip(f"{family_name}/{variant_name}: every case skipped: {skipped[:1]}")
