"""GPU spec data and the roofline maths, against hand-computed numbers."""

import math

import pytest

from rooflint.core.family import Cost
from rooflint.core.roofline import analyse, floor_seconds
from rooflint.core.specs import builtin_specs, detect, get_spec

REQUIRED = ("memory_bandwidth_gbps", "cuda_fp32_tflops", "l2_mib", "sm_count", "boost_clock_mhz")


@pytest.mark.parametrize("key", sorted(builtin_specs()))
def test_every_gpu_has_every_number_with_a_source(key):
    spec = builtin_specs()[key]
    for name in REQUIRED:
        assert spec.get(name), f"{key} lacks {name}"
    assert spec.tensor_peak_tflops("fp16")
    for value in spec.values.values():
        assert value.source.startswith("https://")


def test_sparsity_halving_is_flagged_and_applied():
    h100 = get_spec("h100_sxm")
    assert h100.values["tensor_bf16_tflops"].halved_from_sparse
    assert h100.tensor_peak_tflops("bf16") == pytest.approx(1979 / 2, rel=1e-3)
    # The A100 datasheet quotes the dense figure directly: nothing halved.
    assert not any(v.halved_from_sparse for v in get_spec("a100_80gb_sxm").values.values())


@pytest.mark.parametrize(
    "device_name, key",
    [
        ("NVIDIA H100 80GB HBM3", "h100_sxm"),
        ("NVIDIA H100 PCIe", "h100_pcie"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
        ("Tesla T4", "t4"),
        ("NVIDIA A100-SXM4-40GB", "a100_40gb_sxm"),
        ("NVIDIA H200", "h200"),
    ],
)
def test_detection_from_device_name(device_name, key):
    assert detect(device_name).key == key


def test_unknown_device_is_not_guessed():
    assert detect("Radeon Instinct MI300X") is None


def test_device_properties_override_the_table():
    spec = get_spec("h200").with_device_properties(sm_count=132, l2_bytes=60 * 2**20)
    assert spec.l2_bytes == 60 * 2**20 and "l2_mib" in spec.overrides


def test_memory_bound_point_on_h100():
    # vector_add, 2^28 bf16: 3 * 2^29 bytes, 2^28 FLOPs, measured 0.5297 ms.
    cost = Cost(cuda_flops=2**28, bytes=3 * 2**29)
    point = analyse(cost, 0.5297e-3, get_spec("h100_sxm"), "bf16")
    floor = 3 * 2**29 / 3350e9
    assert point.bound == "memory" and point.compute_unit == "cuda" and point.precision == "fp32"
    assert point.achieved_gbps == pytest.approx(3 * 2**29 / 0.5297e-3 / 1e9)
    assert point.pct_of_roof == pytest.approx(100 * floor / 0.5297e-3)
    assert point.attainable_tflops == pytest.approx(2**28 / floor / 1e12)
    assert point.ai_flop_per_byte == pytest.approx(1 / 6)


def test_compute_bound_point_uses_the_tensor_peak_of_its_precision():
    cost = Cost(tensor_flops=2 * 8192**3, bytes=4 * 8192**2 * 2)
    point = analyse(cost, 1.6187e-3, get_spec("h100_sxm"), "bf16")
    assert point.bound == "compute" and point.compute_unit == "tensor" and point.peak_tflops == pytest.approx(989.5)
    assert point.pct_of_roof == pytest.approx(100 * (2 * 8192**3 / 989.5e12) / 1.6187e-3)


def test_units_overlap_so_the_slower_one_sets_the_floor():
    # Tensor cores and CUDA cores run at once (core/roofline.py): 1 s of matmul beside 2 s of CUDA-core
    # work can finish in 2 s, not 3; the floor is the slower unit's time, and that unit is named.
    spec = get_spec("h100_sxm")
    cost = Cost(tensor_flops=989.5e12, cuda_flops=2 * 67e12, bytes=1.0)
    seconds, bound = floor_seconds(cost, spec, "bf16")
    assert bound == "compute" and seconds == pytest.approx(2.0)
    assert analyse(cost, 4.0, spec, "bf16").compute_unit == "cuda"


def test_zero_flop_kernels_still_get_a_percentage():
    point = analyse(Cost(bytes=3.35e9), 2e-3, get_spec("h100_sxm"), "bf16")
    assert point.pct_of_roof == pytest.approx(50.0) and point.bound == "memory"
    assert math.isnan(point.attainable_tflops)


def test_missing_peak_gives_no_roof_rather_than_a_wrong_one():
    point = analyse(Cost(tensor_flops=1e12, bytes=1e6), 1e-3, get_spec("t4"), "bf16")
    assert math.isnan(point.pct_of_roof)
