"""GPU tier: the LLM families (rmsnorm, swiglu, cross_entropy) on the GPU at sizes the CPU tests cannot
reach (a 128256-word vocabulary, 4096-wide rows, rows past one register tile), every variant that
runs here against float64, and the fused-linear form's point: it never holds the whole logits."""

from __future__ import annotations

import pytest
import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.engine.worker import missing_requirement
from rooflint.kernels.cross_entropy.triton import chunk_tokens

pytestmark = pytest.mark.gpu

CASES = [
    ("rmsnorm", {"rows": 1000, "hidden": 4096, "residual": True}),
    ("rmsnorm", {"rows": 100, "hidden": 40000, "residual": False}),  # past one tile: the looped path
    ("rmsnorm", {"rows": 100, "hidden": 40000, "residual": True}),
    ("swiglu", {"rows": 1000, "inter": 14336, "hidden": 0}),
    ("swiglu", {"rows": 1000, "inter": 3000, "hidden": 1024}),
    ("cross_entropy", {"tokens": 128, "vocab": 128256, "hidden": 0}),
    ("cross_entropy", {"tokens": 1100, "vocab": 128256, "hidden": 256}),  # two chunks of the fused-linear form
]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("family_name,params", CASES)
def test_every_variant_matches_float64_on_the_gpu(family_name, params, dtype):
    family = get_family(family_name)
    if dtype not in family.dtypes:
        pytest.skip(f"{family_name} runs {', '.join(family.dtypes)}, not {dtype}")
    case = family.build_case("custom", params, dtype, torch.device("cuda"))
    with torch.no_grad():
        reference = family.reference(case.inputs, params)
    failures, checked = [], 0
    for variant in family.ordered_variants():
        if variant.kind == "library" or missing_requirement(variant, "cuda"):
            continue  # the peers have their own test (test_library_peers_gpu.py)
        if variant.name == "triton_chunked" and not params.get("hidden"):
            continue
        if variant.dtypes is not None and dtype not in variant.dtypes:
            continue
        try:
            run = variant.build(case)
        except VariantSkipped as skipped:  # a form the variant does not take, with its reason
            print(f"{family_name}/{variant.name} {dtype} {params}: skipped ({skipped})")
            continue
        output = run()
        torch.cuda.synchronize()
        verdict = check(family, dtype, output, reference)
        print(f"{family_name}/{variant.name} {dtype} {params}: relative error {verdict.error:.3g}")
        checked += 1
        if not verdict.passed:
            failures.append(f"{variant.name}: {verdict.message}")
    assert checked and not failures, failures


def _peak_extra_bytes(call) -> int:
    call()  # warm: compile, autotune
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    call()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def test_the_fused_linear_form_never_holds_the_whole_logits():
    family = get_family("cross_entropy")
    params = {"tokens": 4096, "vocab": 128256, "hidden": 512}
    case = family.build_case("custom", params, "bf16", torch.device("cuda"))
    logits_bytes = 4096 * 128256 * 2
    # One chunk's logits: 1046 tokens x 128256 words of bf16, 268 MB (CHUNK_BYTES). Accounting of the
    # peak above `before`: the losses, dx and dW are allocated when the variant is built, and each
    # chunk's gradient overwrites its logits in place, so the design holds one chunk plus a few bytes
    # (the mean). Two chunks at once (537 MB, the next x Wᵀ allocated before the last is freed) fail.
    one_chunk = chunk_tokens(128256, torch.bfloat16) * 128256 * 2
    chunked = _peak_extra_bytes(family.variants["triton_chunked"].build(case))
    whole = _peak_extra_bytes(family.variants["triton"].build(case))
    print(f"peak extra: chunked {chunked / 2**20:.0f} MiB, whole logits {whole / 2**20:.0f} MiB")
    assert whole >= logits_bytes
    assert chunked < 1.5 * one_chunk < logits_bytes / 2, (chunked, one_chunk)
