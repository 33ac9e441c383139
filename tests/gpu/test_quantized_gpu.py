"""GPU tier: scaled_gemm and weight_only_gemm on the GPU against float64 over odd shapes, every
dtype each supports; the fp8 paths (wgmma on Hopper, the e4m3 -> bf16 conversion) only run here,
where the tensor cores and not the interpreter multiply the codes."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import assert_repeatable

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.scaled_gemm.triton import scaled_gemm
from rooflint.kernels.weight_only_gemm.triton import weight_only_linear

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")


def _needs_fp8(dtype: str) -> None:
    if dtype != "int8" and dtype != "w8a16" and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs sm_89 or newer")


def _check(family, case, dtype, out, label):
    torch.cuda.synchronize()
    verdict = check(family, dtype, out, family.reference(case.inputs, case.params))
    print(f"{family.name} {label} {dtype} {case.shape}: relative error {verdict.error:.3g}")
    assert verdict.passed, verdict.message


# (m, k, n, scaling): M tails, K tails of the 128-wide K step (K multiple of 16 for TMA), several
# waves of persistent tiles, and a K long enough (4096) for the fp8 MMA's accumulation to show.
SCALED = [(1, 16, 16, "tensor"), (97, 176, 80, "row"), (300, 1040, 528, "row"), (257, 4096, 384, "tensor"),
          (1024, 768, 3072, "row")]  # fmt: skip


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2", "int8"])
@pytest.mark.parametrize("m,k,n,scaling", SCALED)
def test_scaled_gemm_kernels_match_float64(dtype, m, k, n, scaling):
    _needs_fp8(dtype)
    family = get_family("scaled_gemm")
    case = family.build_case("custom", {"m": m, "k": k, "n": n, "scaling": scaling}, dtype, CUDA, seed=m)
    _check(family, case, dtype, scaled_gemm(case["a"], case["b"], case["sa"], case["sb"]), "triton")
    for variant in ("eager", "eager_unfused"):
        try:
            run = family.variants[variant].build(case)
        except VariantSkipped as skipped:  # cuBLASLt's own refusals (M <= 16 for _int_mm)
            print(f"{variant} skipped: {skipped}")
            continue
        _check(family, case, dtype, run(), variant)


# (m, k, n, group): GPT-2 and Llama-3.2-1B decode shapes (K splits at N = 512 and 768), odd ones
# with K and N tails, and 128-wide groups.
WEIGHT_ONLY = [(1, 768, 2304, 0), (8, 3072, 768, 0), (16, 2048, 512, 0), (7, 8192, 2048, 0), (3, 1000, 333, 0),
               (8, 2048, 8192, 128), (5, 4096, 520, 128), (16, 768, 96, 32)]  # fmt: skip


@pytest.mark.parametrize("dtype", ["w8a16", "wfp8a16"])
@pytest.mark.parametrize("m,k,n,group", WEIGHT_ONLY)
def test_weight_only_kernels_match_float64(dtype, m, k, n, group):
    _needs_fp8(dtype)
    family = get_family("weight_only_gemm")
    case = family.build_case("custom", {"m": m, "k": k, "n": n, "group": group}, dtype, CUDA, seed=m + n)
    run = lambda: weight_only_linear(case["x"], case["w_q"], case["w_scale"], group)  # noqa: E731
    _check(family, case, dtype, run(), "triton")
    assert_repeatable(run)  # the K splits' last arrival sums in a fixed order, whoever finishes first
    for variant in ("bf16_skinny", "bf16_linear", "eager"):
        _check(family, case, dtype, family.variants[variant].build(case)(), variant)
