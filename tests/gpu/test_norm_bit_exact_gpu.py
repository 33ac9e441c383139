"""GPU tier: the CUDA RMSNorm and LayerNorm fast kernels (rmsnorm.cu, layernorm.cu) against float64
over the shapes that take each of their paths: rows whose vectors fill the block (no bounds checks),
ragged rows (4104 and 40 wide: the last vectors masked), one-vector rows, the general path (odd widths
are not 16-byte multiples for 16-bit types), with and without the residual, LayerNorm with its
statistics and with the GELU epilogue."""

from __future__ import annotations

import pytest
import torch

from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.engine.worker import missing_requirement

pytestmark = pytest.mark.gpu

ROWS = (1, 3, 1001)
HIDDEN = (8, 40, 768, 4096, 4104, 8192)
DTYPES = ("fp32", "fp16", "bf16")
FAMILIES = (
    ("rmsnorm", {"residual": False}),
    ("rmsnorm", {"residual": True}),
    ("layernorm", {}),
    ("layernorm_gelu", {}),
)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("family_name,extra", FAMILIES, ids=lambda v: str(v))
def test_cuda_norm_matches_float64(family_name, extra, rows, hidden, dtype):
    family = get_family(family_name)
    if dtype not in family.dtypes:
        pytest.skip(f"{family_name} runs {', '.join(family.dtypes)}, not {dtype}")
    variant = family.variants["cuda"]
    if missing_requirement(variant, "cuda"):
        pytest.skip(missing_requirement(variant, "cuda"))
    params = {"rows": rows, "hidden": hidden, **extra}
    case = family.build_case("custom", params, dtype, torch.device("cuda"))
    with torch.no_grad():
        output = variant.build(case)()
        torch.cuda.synchronize()
        verdict = check(family, dtype, output, family.reference(case.inputs, params))
    assert verdict.passed, f"{family_name} {params} {dtype}: {verdict.message}"


# Several rows a block with the last block's rows partly past the end, over a ragged row (4104 bf16 is
# 513 vectors: one thread's last vector masked) and a whole one: the masked and unmasked paths of the
# same launch, and the multi-row division, must each leave no row unwritten.
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize(
    "rows,hidden,threads_per_row,block_threads",
    [
        (1001, 4104, 64, 256),
        (1001, 4096, 64, 192),
        (1001, 768, 32, 96),
        (1001, 4096, 64, 128),
        (333, 4096, 32, 128),
        (77, 768, 32, 512),
        (5, 8192, 128, 128),
    ],
)
def test_cuda_rmsnorm_packed_rows_match_float64(rows, hidden, threads_per_row, block_threads, residual):
    from rooflint.engine import cuda_build
    from rooflint.kernels.rmsnorm import cuda as rmsnorm_cuda

    family = get_family("rmsnorm")
    params = {"rows": rows, "hidden": hidden, "residual": residual}
    case = family.build_case("custom", params, "bf16", torch.device("cuda"))
    library = cuda_build.load(cuda_build.family_source(rmsnorm_cuda.__file__, "rmsnorm"))
    x, w = case["x"], case["weight"]
    y = torch.full_like(x, float("nan"))  # a row left unwritten fails the check
    h = torch.full_like(x, float("nan")) if residual else None
    out = rmsnorm_cuda.cuda_rmsnorm(
        library, x, w, y, case.inputs.get("residual"), h, threads_per_row=threads_per_row, block_threads=block_threads
    )
    torch.cuda.synchronize()
    verdict = check(family, "bf16", out, family.reference(case.inputs, params))
    assert verdict.passed, verdict.message
