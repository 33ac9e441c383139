"""Quantized dtypes as an axis: names, planning, the one-line error, scales in the cost models,
the quantize/dequantize maths, and the roof of the precision the tensor cores run."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from result_factory import row

from rooflint.analysis.lint import lint_row
from rooflint.core.errors import UserError
from rooflint.core.family import DTYPES, QUANTIZED_DTYPES
from rooflint.core.registry import get_family
from rooflint.core.roofline import analyse
from rooflint.core.specs import get_spec
from rooflint.engine.bench import plan
from rooflint.engine.request import BenchRequest
from rooflint.kernels.scaled_gemm.formats import QMAX, dequantize64, quantize
from rooflint.outputs.points import ceilings_for

H100 = get_spec("h100_sxm")
CPU = torch.device("cpu")


def test_each_quantized_name_builds_inputs_in_its_storage_dtype_and_keeps_its_name():
    cases = [("scaled_gemm", "fp8_e4m3", "a"), ("scaled_gemm", "int8", "a"), ("weight_only_gemm", "w8a16", "w_q"),
             ("weight_only_gemm", "wfp8a16", "w_q")]  # fmt: skip
    for family_name, dtype, operand in cases:
        family = get_family(family_name)
        case = family.build_case("small", family.sizes["small"][0], dtype, CPU)
        assert case[operand].dtype == DTYPES[dtype]
        assert case.dtype_name == dtype  # w8a16 is stored as int8 but stays w8a16
    e5m2 = get_family("scaled_gemm").build_case("small", get_family("scaled_gemm").sizes["small"][0], "fp8_e5m2", CPU)
    assert (e5m2["a"].dtype, e5m2["b"].dtype) == (torch.float8_e5m2, torch.float8_e4m3fn)  # gradient x weight


def _plan(families, dtypes):
    return plan(BenchRequest(families=families, dtypes=dtypes, size="small", device="cpu"))


def test_only_families_that_declare_a_quantized_dtype_are_asked_for_it():
    tasks = _plan(["all"], list(QUANTIZED_DTYPES))
    assert {t.family for t in tasks} == {"scaled_gemm", "weight_only_gemm", "gelu_linear", "attention"}
    assert {(t.family, t.dtype) for t in tasks} == {("scaled_gemm", d) for d in ("fp8_e4m3", "fp8_e5m2", "int8")} | {
        ("weight_only_gemm", d) for d in ("w8a16", "wfp8a16")
    } | {("gelu_linear", d) for d in ("fp8_e4m3", "fp8_e5m2")} | {("attention", "fp8_e4m3")}
    # The default bench (bf16) never reaches them.
    assert not {t.family for t in _plan(["all"], ["bf16"])} & {"scaled_gemm", "weight_only_gemm"}


def test_a_quantized_dtype_no_named_family_runs_is_one_line_naming_what_they_run():
    with pytest.raises(UserError) as error:
        _plan(["softmax"], ["fp8_e4m3"])
    assert "\n" not in str(error.value)
    assert "(fp8_e4m3)" in str(error.value) and "--dtype fp32, fp16, bf16" in str(error.value)
    with pytest.raises(UserError, match="unknown dtype 'fp4'; valid: .*fp8_e4m3, fp8_e5m2, int8, w8a16, wfp8a16"):
        _plan(["scaled_gemm"], ["fp4"])


def _moved_bytes(case, output) -> int:
    return sum(t.numel() * t.element_size() for t in case.inputs.values()) + output.numel() * output.element_size()


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2", "int8"])
@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_scaled_gemm_bytes_are_its_codes_scales_and_output(dtype, scaling):
    family = get_family("scaled_gemm")
    params = {"m": 24, "k": 48, "n": 40, "scaling": scaling}
    case = family.build_case("custom", params, dtype, CPU)
    output = family.variants["eager"].build(case)()
    assert family.cost(params, dtype).bytes == _moved_bytes(case, output)
    scales = 2 if scaling == "tensor" else 24 + 40
    assert family.cost(params, dtype).bytes == 24 * 48 + 40 * 48 + 4 * scales + 2 * 24 * 40


@pytest.mark.parametrize("group", [0, 16])
def test_weight_only_bytes_are_the_one_byte_weight_its_scales_and_bf16_activations(group):
    family = get_family("weight_only_gemm")
    params = {"m": 3, "k": 64, "n": 24, "group": group}
    case = family.build_case("custom", params, "w8a16", CPU)
    output = family.variants["eager"].build(case)()
    bf16_weight = case["w_bf16"]  # the bf16 kernels' operand, not this format's
    expected = _moved_bytes(case, output) - bf16_weight.numel() * bf16_weight.element_size()
    assert family.cost(params, "w8a16").bytes == expected
    assert case["w_scale"].numel() == (24 * 64 // group if group else 24)
    # The bf16 rows are charged the 2-byte weight and no scales.
    bf16 = family.variants["bf16_linear"].modeled_bytes(params, "w8a16")
    assert bf16 == 2 * 3 * 64 + 2 * 24 * 64 + 2 * 3 * 24


def test_bad_group_and_too_many_rows_are_user_errors():
    family = get_family("weight_only_gemm")
    for params in ({"m": 1, "k": 96, "n": 8, "group": 64}, {"m": 1, "k": 96, "n": 8, "group": 24},
                   {"m": 17, "k": 96, "n": 8, "group": 0}):  # fmt: skip
        with pytest.raises(UserError):
            family.cost(params, "w8a16")
    with pytest.raises(UserError, match="scaling='channel'.*valid: tensor, row, block"):
        get_family("scaled_gemm").cost({"m": 8, "k": 8, "n": 8, "scaling": "channel"}, "int8")


@settings(max_examples=30, deadline=None)
@given(
    dtype=st.sampled_from(list(QMAX)),
    per=st.sampled_from(["tensor", "row"]),
    rows=st.integers(1, 6),
    groups=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_dequantized_codes_stay_within_half_a_step_of_the_input(dtype, per, rows, groups, seed):
    group = 16 if per == "row" and groups > 1 else 0
    x = torch.randn(rows, 16 * groups, generator=torch.Generator().manual_seed(seed)) * 3
    codes, scale = quantize(x, dtype, per, group)
    assert codes.dtype == dtype and scale.dtype == torch.float32
    back = dequantize64(codes, scale, group)
    step = scale.double().repeat_interleave(group, dim=1) if group else scale.double()
    if dtype == torch.int8:
        assert codes.abs().max() <= 127
        assert ((back - x.double()).abs() <= step / 2 + 1e-12).all()  # round to nearest
    else:
        # 3 (e4m3) or 2 (e5m2) mantissa bits: a relative half-ulp of 2^-4 or 2^-3 above the subnormals.
        rel = 2.0**-4 if dtype == torch.float8_e4m3fn else 2.0**-3
        tiny = step * QMAX[dtype] * 2.0**-9
        assert ((back - x.double()).abs() <= rel * x.double().abs() + tiny).all()
    # The largest magnitude of each scaled block maps onto the format's largest value.
    assert back.abs().max() == pytest.approx(x.abs().max().item(), rel=1e-6)


def test_fp8_and_int8_gemms_are_judged_against_their_own_tensor_peak():
    scaled = get_family("scaled_gemm")
    params = {"m": 8192, "k": 8192, "n": 8192, "scaling": "row"}
    for dtype, peak in (("fp8_e4m3", 1979), ("fp8_e5m2", 1979), ("int8", 1979)):
        point = analyse(scaled.cost(params, dtype), 1e-3, H100, scaled.tensor_precision(dtype))
        assert point.tensor_peak_tflops == peak and point.precision in ("fp8", "int8")
    assert get_spec("a100_80gb_sxm").tensor_peak_tflops("int8") == 624
    assert get_spec("a100_80gb_sxm").tensor_peak_tflops("fp8_e4m3") is None  # no fp8 on Ampere: no roof
    weight_only = get_family("weight_only_gemm")
    assert weight_only.tensor_precision("w8a16") == weight_only.tensor_precision("wfp8a16") == "bf16"


def test_lint_holds_an_fp8_gemm_to_the_fp8_roof_not_the_bf16_one():
    scaled = get_family("scaled_gemm")
    params = {"m": 8192, "k": 8192, "n": 8192, "scaling": "tensor"}
    cost = scaled.cost(params, "fp8_e4m3")
    flops = 2 * 8192**3

    def fp8_row(tflops):
        return row("scaled_gemm", "triton", flops / tflops / 1e9, dtype="fp8_e4m3", cost=cost, shape="m=8192")

    # 1,400 TFLOP/s: above the bf16 peak (989.5), under the fp8 one (1979): possible.
    assert "above_roof" not in {f.rule for f in lint_row(fp8_row(1400), H100)}
    assert fp8_row(1400).precision == "fp8" and fp8_row(1400).tensor_peak_tflops == 1979
    assert "above_roof" in {f.rule for f in lint_row(fp8_row(2300), H100)}
    # A weight-only decode row runs bf16 MMAs: 1,400 TFLOP/s would be impossible there.
    weight_only = get_family("weight_only_gemm")
    decode = weight_only.cost({"m": 16, "k": 8192, "n": 8192, "group": 0}, "w8a16")
    fast = row("weight_only_gemm", "triton", 2 * 16 * 8192**2 / 1400e9, dtype="w8a16", cost=decode, shape="m=16")
    assert "above_roof" in {f.rule for f in lint_row(fast, H100)}


def test_the_roofline_draws_the_fp8_roof_for_fp8_rows():
    labels = dict(ceilings_for(H100, {"fp8_e4m3", "bf16"}))
    assert labels["tensor fp8"] == 1979 and labels["tensor bf16"] == 989.5
    assert dict(ceilings_for(H100, {"int8", "fp8_e5m2"}))["tensor fp8/int8"] == 1979
    assert "tensor fp8" not in dict(ceilings_for(H100, {"bf16"}))


def test_a_cpu_run_has_fp8_and_int8_roofs_at_its_fp32_gemm_rate(monkeypatch):
    from rooflint.engine import ceilings

    # The measuring itself is test_ceilings' business: here every timed call "takes" 1 ms.
    monkeypatch.setattr(ceilings, "_CPU_SPEC", None)
    monkeypatch.setattr(ceilings, "_wall_best", lambda fn, reps: 1e-3)
    monkeypatch.setattr(ceilings, "_copier", lambda n, device: None)
    spec = ceilings.measure_cpu_ceilings()
    for dtype in ("fp8_e4m3", "fp8_e5m2", "int8"):
        assert spec.tensor_peak_tflops(dtype) == spec.tensor_peak_tflops("fp32") > 0
    assert spec.tensor_peak_tflops("w8a16") == spec.tensor_peak_tflops("bf16")
