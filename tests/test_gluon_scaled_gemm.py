"""scaled_gemm's Gluon block-scaled GEMM (`triton_gluon`) on a machine without a GPU: it compiles for
sm_90a to the schedule it claims (a TMA producer warp, wgmma on the codes, TMA stores) inside an
H100's shared memory, without spills and without ptxas serializing its wgmmas, for every format; the
variant takes what it can and refuses the rest with the reason; and its launcher checks its
arguments. Gluon has no CPU interpreter, so its numbers are checked against float64 on the GPU tier
(tests/gpu/test_gpu_scaled_gemm_gluon.py)."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import compile_gluon_for_sm90

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.engine.ab.configs import config_defaults
from rooflint.kernels.scaled_gemm import gluon as sg

needs_gluon = pytest.mark.skipif(not sg.HAS_GLUON, reason="this Triton has no Gluon Hopper ops")
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


@needs_gluon
@pytest.mark.xdist_group("gluon_sm90a")  # one compile process for the three kernels
def test_gluon_block_scaled_gemm_compiles_to_its_schedule_for_sm90a(tmp_path_factory):
    rows = compile_gluon_for_sm90("scaled_gemm", tmp_path_factory)
    assert [(row["a_dtype"], row["b_dtype"]) for row in rows] == [
        (str(E4M3), str(E4M3)),
        (str(E5M2), str(E4M3)),
        ("torch.int8", "torch.int8"),
    ]
    for row in rows:
        assert 0 < row["shared_bytes"] <= 227 * 1024, row  # one CTA per SM on an H100 / H200
        assert row["wgmma"] >= 4, row  # a 128-deep K block in 32-deep fp8/int8 instructions
        assert row["tma_loads"] >= 3 and row["tma_stores"] >= 1, row  # A twice and B; C
        assert row["setmaxnreg"] > 0 and row["warps"] >= 9, row  # two consumer warpgroups and the producer
        assert row["spill_bytes"] == 0, row
        # A non-wgmma instruction touching a wgmma's accumulator inside its pipeline stage makes
        # ptxas wait for every wgmma right after it issues: the overlap the kernel exists for is gone.
        assert row["serialized"] is False, row


def _case(dtype, m, k, n, scaling="block"):
    family = get_family("scaled_gemm")
    return family.build_case("custom", {"m": m, "k": k, "n": n, "scaling": scaling}, dtype, torch.device("cpu"))


@pytest.mark.parametrize(
    "a_dtype,b_dtype,k,n,scaling,reason",
    [
        (E4M3, E4M3, 256, 64, "block", None),
        (E5M2, E4M3, 256, 64, "block", None),
        (torch.int8, torch.int8, 256, 64, "block", None),
        (E4M3, E4M3, 256, 64, "row", "per-tensor and per-row scales run in the triton variant"),
        (E4M3, E4M3, 256, 64, "tensor", "per-tensor and per-row scales run in the triton variant"),
        (E4M3, E5M2, 256, 64, "block", "B is e4m3"),
        (E4M3, torch.int8, 256, 64, "block", "fp8 by e4m3 or int8 by int8"),
        (torch.int8, E4M3, 256, 64, "block", "fp8 by e4m3 or int8 by int8"),
        (torch.bfloat16, torch.bfloat16, 256, 64, "block", "fp8 by e4m3 or int8 by int8"),
        (E4M3, E4M3, 200, 64, "block", "K a multiple of 16"),
        (E4M3, E4M3, 256, 60, "block", "N of 8"),
    ],
)
def test_the_kernel_takes_what_it_can_and_says_why_not(a_dtype, b_dtype, k, n, scaling, reason):
    a, b = torch.zeros(32, k, dtype=a_dtype), torch.zeros(n, k, dtype=b_dtype)
    found = sg.why_not(a, b, scaling)
    assert found is None if reason is None else reason in found


def test_the_variant_is_skipped_with_its_reason_on_a_cpu():
    family = get_family("scaled_gemm")
    assert set(family.variants["triton_gluon"].dtypes) == {"fp8_e4m3", "fp8_e5m2", "int8"}
    with pytest.raises(VariantSkipped, match="CPU interpreter|Gluon"):
        family.variants["triton_gluon"].build(_case("fp8_e4m3", 40, 288, 144))
    with pytest.raises(VariantSkipped, match="per-tensor and per-row scales"):
        family.variants["triton_gluon"].build(_case("fp8_e4m3", 40, 288, 144, scaling="row"))


@needs_gluon
@pytest.mark.parametrize(
    "capability,expected", [((9, 0), None), ((8, 0), "sm_90"), ((10, 0), "sm_90"), ((12, 0), "sm_90")]
)
def test_the_kernel_runs_only_on_sm90(monkeypatch, capability, expected):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    reason = sg.unsupported_reason(torch.device("cuda", 0))
    assert reason is None if expected is None else expected in reason


def test_the_launcher_refuses_scales_of_another_shape_and_bad_settings():
    case = _case("fp8_e4m3", 40, 288, 144)
    a, b, sa, sb = case["a"], case["b"], case["sa"], case["sb"]
    with pytest.raises(ValueError, match="do not fit"):
        sg.prepare(a, b, sa[:, :2], sb)
    with pytest.raises(ValueError, match="do not fit"):
        sg.prepare(a, b, sa, sb[:1])
    for config in ({"STAGES": 0}, {"STAGES": 6}, {"GROUP_M": 0}):
        with pytest.raises(ValueError, match="STAGES"):
            sg.prepare(a, b, sa, sb, config=config)


def test_ab_configs_name_the_kernels_own_settings():
    build = get_family("scaled_gemm").variants["triton_gluon"].build
    assert dict(config_defaults(build)) == {"STAGES": sg.STAGES, "GROUP_M": sg.GROUP_M}
