"""Cross-GPU projection against hand-computed roofline numbers."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from result_factory import CPU, MATMUL_BF16, VECTOR_ADD_BF16, N, row, write

from rooflint.analysis.projection import FLOOR_ONLY, KEEP_FRACTION, PREDICTED, project
from rooflint.core.specs import get_spec
from rooflint.outputs.plot import plot_roofline
from rooflint.outputs.results import read_results

A100_GBPS, H100_GBPS = 2039e9, 3350e9  # datasheet bandwidths, bytes/s


def _frame(rows, tmp_path):
    return read_results(write(rows, tmp_path / "r"))


def test_memory_bound_kernel_keeps_its_fraction_of_roof(tmp_path):
    frame = _frame([row("vector_add", "triton", 0.55)], tmp_path)
    got = project(frame, get_spec("a100_80gb_sxm")).iloc[0]
    bytes_ = 3 * N * 2  # read a, b and write c, 2 bytes each
    floor_ms = bytes_ / A100_GBPS * 1e3  # 0.78990 ms
    pct_on_h100 = 100 * (bytes_ / H100_GBPS * 1e3) / 0.55  # 87.41 %
    assert got["floor_ms"] == pytest.approx(floor_ms)
    assert got["floor_ms"] == pytest.approx(0.789903, rel=1e-5)
    assert got["source_pct_of_roof"] == pytest.approx(pct_on_h100)
    assert got["predicted_ms"] == pytest.approx(0.55 * 3350 / 2039)  # the same fraction of a lower roof
    assert got["predicted_ms"] == pytest.approx(0.903629, rel=1e-5)
    assert got["achieved_gbps"] == pytest.approx(bytes_ / (0.55e-3 * 3350 / 2039) / 1e9)
    assert got["ai_flop_per_byte"] == pytest.approx(1 / 6)  # one add per 6 bytes, on every GPU
    assert got["bound"] == "memory"
    assert got["model"] == KEEP_FRACTION
    assert got["point_kind"] == PREDICTED
    assert got["source_gpu"] == "h100_sxm" and got["gpu"] == "a100_80gb_sxm"


def test_compute_bound_kernel_uses_the_target_tensor_peak(tmp_path):
    # 4096^3 bf16 matmul measured at 0.2 ms on the H100 (69.4% of its 989.5 TFLOP/s roof).
    frame = _frame([row("matmul", "triton", 0.2, shape="M=N=K=4096", cost=MATMUL_BF16)], tmp_path)
    got = project(frame, get_spec("a100_80gb_sxm")).iloc[0]
    flops = 2 * 4096**3
    floor_ms = flops / 312e12 * 1e3  # 0.44051 ms; memory would take only 0.0494 ms
    fraction = (flops / 989.5e12 * 1e3) / 0.2
    assert got["bound"] == "compute"
    assert got["floor_ms"] == pytest.approx(floor_ms)
    assert got["predicted_ms"] == pytest.approx(floor_ms / fraction)
    assert got["predicted_ms"] == pytest.approx(0.2 * 989.5 / 312)
    assert got["attainable_tflops"] == pytest.approx(312)
    assert got["achieved_tflops"] == pytest.approx(312 * fraction)


def test_missing_peak_rows_off_target_and_not_ok_rows(tmp_path):
    rows = [
        row("matmul", "triton", 0.2, shape="M=N=K=4096", cost=MATMUL_BF16),  # T4 has no bf16 tensor cores
        row("vector_add", "cuda", status="failed", message="rel error 1.0"),  # nothing to scale
        row("vector_add", "eager", 0.6, gpu="t4"),  # measured on the target itself
        row("vector_add", "triton", 0.55),
    ]
    got = project(_frame(rows, tmp_path), get_spec("t4"))
    assert list(got["variant"]) == ["triton", "triton"]
    matmul, vector_add = got.iloc[0], got.iloc[1]
    assert math.isnan(matmul["predicted_ms"]) and "no bf16 tensor-core peak" in matmul["note"]
    assert vector_add["floor_ms"] == pytest.approx(3 * N * 2 / 320e9 * 1e3)


def test_cpu_rows_project_the_floor_only(tmp_path):
    frame = _frame([row("vector_add", "eager", 50.0, gpu="cpu", spec=CPU)], tmp_path)
    got = project(frame, get_spec("h100_sxm")).iloc[0]
    assert got["model"] == FLOOR_ONLY
    assert got["predicted_ms"] == pytest.approx(VECTOR_ADD_BF16.bytes / H100_GBPS * 1e3)
    assert got["predicted_ms"] == got["floor_ms"]


def test_projected_points_plot_and_their_csv_marks_them(tmp_path):
    frame = _frame([row("vector_add", "triton", 0.55), row("vector_add", "eager", 0.6)], tmp_path)
    points = project(frame, get_spec("l4"))
    plot_roofline(points, get_spec("l4"), tmp_path / "roofline_l4", "projected")
    data = pd.read_csv(tmp_path / "roofline_l4.csv")
    marked = data[data["point_kind"] == PREDICTED]
    assert len(marked) == 2
    assert set(marked["label"]) == {"vector_add/triton bf16 from h100_sxm", "vector_add/eager bf16 from h100_sxm"}
