"""GPU tier: scaled_gemm's CUDA wgmma fp8 GEMM (scaled_gemm_hopper.cu) against float64 on sm_90, and
the block-scaled forms (Triton, torch._scaled_mm's block-wise form) that only a GPU runs for real.

The CUDA kernel's edges: M and N not multiples of the 128 x BLOCK_N tile (zero-filled TMA rows,
masked stores), an odd N (the scalar store path), K not a multiple of the 128-code slice (the
zero-filled tail; K must be a multiple of 16, TMA's row pitch), K long enough that the ring wraps
many times, both tile widths forced and chosen, and grids with more tiles than SMs, so each
persistent CTA carries its ring's phases from one tile into the next.
"""

from __future__ import annotations

import pytest
import torch
from kernel_checks import assert_repeatable

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.engine import cuda_build
from rooflint.engine.correctness import check
from rooflint.kernels import scaled_gemm
from rooflint.kernels.scaled_gemm.cuda import cuda_scaled_gemm
from rooflint.kernels.scaled_gemm.triton import scaled_gemm as triton_scaled_gemm

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")
# (m, k, n): one row; tails of M, N and the K slice; an odd N; a long K; GPT-2's MLP up over 1024
# tokens; 2048 x 4096 outputs (256 tiles of 128 x 256: two per CTA on 132 SMs).
SHAPES = [(1, 16, 16), (97, 176, 80), (300, 1040, 528), (257, 4096, 385), (1024, 768, 3072), (2048, 512, 4096)]


def _hopper_library():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the fp8 wgmma GEMM runs on sm_90 only")
    return cuda_build.load(cuda_build.family_source(scaled_gemm.__file__, "scaled_gemm_hopper"))


def _case(dtype, m, k, n, scaling, seed):
    family = get_family("scaled_gemm")
    return family, family.build_case("custom", {"m": m, "k": k, "n": n, "scaling": scaling}, dtype, CUDA, seed=seed)


def _check(family, case, dtype, out, label):
    torch.cuda.synchronize()
    verdict = check(family, dtype, out, family.reference(case.inputs, case.params))
    print(f"scaled_gemm {label} {dtype} {case.shape}: relative error {verdict.error:.3g}")
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("scaling", ["tensor", "row"])
@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("block_n", [0, 128, 256])
def test_cuda_fp8_gemm_matches_float64(dtype, scaling, m, k, n, block_n):
    library = _hopper_library()
    family, case = _case(dtype, m, k, n, scaling, seed=m + n)
    out = torch.empty((m, n), dtype=torch.bfloat16, device=CUDA)
    cuda_scaled_gemm(library, case["a"], case["b"], case["sa"], case["sb"], out, block_n)
    _check(family, case, dtype, out, f"cuda block_n={block_n} {scaling}")


def test_cuda_fp8_gemm_is_repeatable():
    """A stage handed back before its wgmmas retired (or a phase lost between a CTA's tiles) shows
    as calls that differ: 20 calls over 2 tiles a CTA, the ring wrapping 16 times a tile, must agree."""
    library = _hopper_library()
    _, case = _case("fp8_e4m3", 2048, 8192, 4096, "row", seed=3)
    out = torch.empty((2048, 4096), dtype=torch.bfloat16, device=CUDA)
    assert_repeatable(lambda: cuda_scaled_gemm(library, case["a"], case["b"], case["sa"], case["sb"], out, 256))


def test_the_cuda_variant_refuses_what_it_cannot_run_with_the_reason():
    _hopper_library()
    family = get_family("scaled_gemm")
    assert set(family.variants["cuda"].dtypes) == {"fp8_e4m3", "fp8_e5m2"}  # int8: the triton variant
    for dtype, m, k, n, scaling, reason in [
        ("fp8_e4m3", 32, 200, 48, "row", "K must be a multiple of 16"),
        ("fp8_e4m3", 32, 256, 48, "block", "per-block scales run in the triton variant"),
    ]:
        _, case = _case(dtype, m, k, n, scaling, seed=0)
        with pytest.raises(VariantSkipped, match=reason):
            family.variants["cuda"].build(case)


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2", "int8"])
@pytest.mark.parametrize("m,k,n", [(97, 176, 80), (300, 1040, 528), (1024, 768, 3072), (256, 512, 768)])
def test_block_scaled_gemm_matches_float64(dtype, m, k, n):
    """The Triton kernel's per-K-block scaling on the tensor cores; torch._scaled_mm's block-wise
    form where this torch and cuBLASLt offer it (its refusal is printed: the bench row's skip).
    K = 1040 and 768 have 9 and 6 K blocks, not a multiple of 4: B's scales go padded to a pitch of
    12 and 8 (cublas_block_scales). 256 x 512 x 768 is torch's own test shape, so there the
    block-wise form must run on sm_90, not skip."""
    if dtype != "int8" and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs sm_89 or newer")
    family, case = _case(dtype, m, k, n, "block", seed=m)
    out = triton_scaled_gemm(case["a"], case["b"], case["sa"], case["sb"], blocks=True)
    _check(family, case, dtype, out, "triton block")
    for variant in ("eager", "eager_unfused"):
        try:
            run = family.variants[variant].build(case)
        except VariantSkipped as skipped:
            print(f"{variant} block skipped: {skipped}")
            torch_own_case = (m, k, n) == (256, 512, 768) and dtype == "fp8_e4m3"
            assert not (torch_own_case and torch.cuda.get_device_capability() == (9, 0)), skipped
            continue
        _check(family, case, dtype, run(), f"{variant} block")
