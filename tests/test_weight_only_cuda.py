"""weight_only_gemm's CUDA kernel (kernels/weight_only_gemm/cuda.cu), the rules a CPU can check: which K
splits it takes, why it refuses a call (the model falls back to Triton then), the variant's skip reason
and a STEPS config it cannot run refused at build. Its sums against float64 are in the GPU tier
(tests/gpu/test_gpu_weight_only_cuda.py); its source compiles in tests/test_cuda_sources.py."""

from __future__ import annotations

import pytest
import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.kernels.weight_only_gemm import cuda


@pytest.mark.parametrize(
    "k,m,steps",
    [
        (2048, 8, 16),  # Llama-3.2-1B q/o, gate/up: 8 warps of 16 steps (24 does not divide 2048)
        (8192, 8, 32),  # its down projection: the one split, 16 warps of 32 steps
        (768, 8, 12),  # GPT-2: 4 warps of 12
        (3072, 8, 24),  # GPT-2's MLP down: 8 warps of 24
        (3072, 16, 16),  # two x tiles: 24 steps would spill, so 12 warps of 16
        (14336, 1, 0),  # Llama-3.1-8B's down projection: no split (28 warps of 32): Triton runs
        (96, 8, 0),  # too short for 4 warps
    ],
)
def test_steps_for_takes_the_model_shapes_and_refuses_what_it_cannot_split(k, m, steps):
    got = cuda.steps_for(k, m)
    assert got == steps
    if got:
        warps = k // (16 * got)
        assert k == 16 * got * warps and (4 if m <= 8 else 8) <= warps <= cuda.MAX_WARPS
        assert m <= 8 or got <= 16


def test_why_not_names_the_reason_a_call_goes_to_triton():
    x = torch.zeros(8, 2048, dtype=torch.bfloat16)
    codes = torch.zeros(64, 2048, dtype=torch.int8)
    assert "CUDA GPU" in cuda.why_not(x, codes, torch.ones(64, 1))


def test_the_variant_skips_on_cpu_and_refuses_a_steps_value_it_cannot_run():
    family = get_family("weight_only_gemm")
    assert "cuda" in family.variants
    case = family.build_case("custom", {"m": 8, "k": 768, "n": 16, "group": 0}, "w8a16", torch.device("cpu"), seed=1)
    with pytest.raises(VariantSkipped, match="CUDA GPU"):
        cuda.cuda_variant(case)


def test_a_steps_config_that_splits_no_k_is_refused_before_any_launch(monkeypatch):
    family = get_family("weight_only_gemm")
    case = family.build_case("custom", {"m": 8, "k": 768, "n": 16, "group": 0}, "w8a16", torch.device("cpu"), seed=1)
    monkeypatch.setattr(cuda, "why_not", lambda *args, **kwargs: None)  # as on a GPU
    with pytest.raises(ValueError, match="STEPS=32 splits no K = 768 at M = 8; steps_for picks 12"):
        cuda.cuda_variant(case, config={"STEPS": 32, "PDL": None})
