"""Measured ceilings: CPU measurement, storage in the cache, the measured roof, the ceiling kernels."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from rooflint.cli.app import app
from rooflint.core import roofs
from rooflint.core.errors import UserError
from rooflint.core.specs import get_spec
from rooflint.engine import ceiling_kernels, ceilings, graph_timing

H100_MEASURED = {
    "memory_bandwidth_gbps": 2959.0,
    "l2_bandwidth_gbps": 5751.0,
    "tensor_bf16_tflops": 783.0,
    "cuda_fp32_tflops": 65.96,
    "l2_mib": 50.0,
}


def test_cpu_ceilings_are_a_measured_spec():
    spec = ceilings.measure_cpu_ceilings()
    assert spec.key == "cpu" and spec.origin == "measured"
    assert spec.bandwidth_gbps > 0 and spec.l2_bytes > 0
    for precision in ("fp32", "bf16", "fp16", "tf32"):
        assert spec.tensor_peak_tflops(precision) > 0
    assert spec.cuda_peak_tflops("fp32") == spec.tensor_peak_tflops("fp32")
    assert ceilings.measure_cpu_ceilings() is spec  # measured once per process
    # Each precision's roof is at least the fp32 GEMM's: a CPU without a fast bf16 GEMM still runs
    # bf16 ops upcast at the fp32 rate, and a roof below them would call them impossible.
    for precision in ("bf16", "fp16"):
        assert spec.tensor_peak_tflops(precision) >= spec.tensor_peak_tflops("fp32")


@pytest.mark.parametrize("bf16_probe_rate, measured_at_full_size", [(0.3, False), (2.0, True)])
def test_a_slow_fallback_gemm_is_not_timed_at_full_size(monkeypatch, bf16_probe_rate, measured_at_full_size):
    """A bf16 GEMM far behind fp32 at 256^3 is a scalar fallback: its 1024^3 call (seconds on a CI
    box) is skipped and its roof is the fp32 GEMM's; one that keeps up is measured at full size. A
    GEMM hundreds of times behind fp32 at 64^3 (fp8's scalar _scaled_mm) is not probed at 256^3 at
    all, while one merely slow at 64^3 (AMX bf16's start-up there) still is."""
    calls = []

    def fake_rate(dtype, n, reps=3):
        calls.append((dtype, n))
        if dtype == torch.float32:
            return {64: 0.5, 256: 1.0}.get(n, 4.0)
        if dtype in (torch.float16, torch.int8):  # scalar fallbacks, slow but within 50x at 64^3
            return {64: 0.05, 256: 0.1}.get(n, 0.2)
        if dtype == torch.float8_e4m3fn:  # hundreds of times behind at 64^3
            return {64: 0.001, 256: 0.002}.get(n, 0.002)
        return {64: 0.08, 256: bf16_probe_rate}.get(n, 8.0)  # bf16: 6x behind fp32 at 64^3

    monkeypatch.setattr(ceilings, "_CPU_SPEC", None)
    monkeypatch.setattr(ceilings, "_cpu_gemm_tflops", fake_rate)
    monkeypatch.setattr(ceilings, "_wall_best", lambda fn, reps: 1.0)
    monkeypatch.setattr(ceilings, "_copier", lambda n, device: lambda: None)
    spec = ceilings.measure_cpu_ceilings(copy_mib=1)
    assert (torch.bfloat16, 256) in calls
    assert ((torch.bfloat16, 1024) in calls) is measured_at_full_size
    assert spec.tensor_peak_tflops("bf16") == (8.0 if measured_at_full_size else 4.0)
    assert spec.tensor_peak_tflops("fp16") == 4.0
    assert (torch.float16, 256) in calls and (torch.float16, 1024) not in calls
    assert (torch.float8_e4m3fn, 64) in calls and (torch.float8_e4m3fn, 256) not in calls
    assert spec.tensor_peak_tflops("fp8_e4m3") == 4.0
    monkeypatch.setattr(ceilings, "_CPU_SPEC", None)


def test_an_int8_gemm_faster_than_fp32_raises_the_int8_roof_and_a_slow_fp8_one_does_not(monkeypatch):
    """A CPU with VNNI runs torch._int_mm several times faster than the fp32 GEMM: the int8 roof is
    its measured rate, or scaled_gemm's int8 rows read as above the roof. The fp8 _scaled_mm
    fallback is slower than fp32: its roof stays the fp32 GEMM's."""
    rates = {torch.float32: (1.0, 4.0), torch.int8: (6.0, 32.0), torch.float8_e4m3fn: (0.05, 0.1)}
    calls = []

    def fake_rate(dtype, n, reps=3):
        calls.append((dtype, n))
        probe, full = rates.get(dtype, (0.1, 0.2))
        return probe if n in (64, 256) else full

    monkeypatch.setattr(ceilings, "_CPU_SPEC", None)
    monkeypatch.setattr(ceilings, "_cpu_gemm_tflops", fake_rate)
    monkeypatch.setattr(ceilings, "_wall_best", lambda fn, reps: 1.0)
    monkeypatch.setattr(ceilings, "_copier", lambda n, device: lambda: None)
    spec = ceilings.measure_cpu_ceilings(copy_mib=1)
    assert spec.tensor_peak_tflops("int8") == 32.0 and (torch.int8, 1024) in calls
    assert spec.tensor_peak_tflops("fp8") == 4.0 and (torch.float8_e4m3fn, 1024) not in calls
    monkeypatch.setattr(ceilings, "_CPU_SPEC", None)


def test_cache_dir_honours_rooflint_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("ROOFLINT_CACHE", str(tmp_path))
    assert roofs.cache_dir() == tmp_path / "ceilings"
    monkeypatch.delenv("ROOFLINT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert roofs.cache_dir() == tmp_path / "xdg" / "rooflint" / "ceilings"


def test_save_and_load_round_trip(monkeypatch, tmp_path):
    monkeypatch.setenv("ROOFLINT_CACHE", str(tmp_path))
    assert roofs.load_measured_ceilings("h100_sxm") is None
    path = roofs.save_ceilings("h100_sxm", "NVIDIA H100 80GB HBM3", H100_MEASURED)
    assert path == tmp_path / "ceilings" / "h100_sxm.toml"
    assert roofs.load_measured_ceilings("h100_sxm") == H100_MEASURED


def test_load_rejects_a_broken_file(tmp_path):
    (tmp_path / "t4.toml").write_text("[t4\nmemory_bandwidth_gbps = 1")
    try:
        roofs.load_measured_ceilings("t4", tmp_path)
    except UserError as error:
        assert "re-run `rooflint ceilings`" in str(error)
    else:
        raise AssertionError("a broken ceilings file must be a UserError")


def test_roof_spec_measured_overrides_datasheet(tmp_path):
    datasheet = get_spec("h100_sxm")
    assert roofs.roof_spec(datasheet, "datasheet", tmp_path) is datasheet
    try:
        roofs.roof_spec(datasheet, "measured", tmp_path)
    except UserError as error:
        assert "rooflint ceilings" in str(error)
    else:
        raise AssertionError("--roof measured without measured ceilings must be a UserError")
    roofs.save_ceilings("h100_sxm", "H100", H100_MEASURED, tmp_path)
    measured = roofs.roof_spec(datasheet, "measured", tmp_path)
    assert measured.origin == "measured"
    assert measured.bandwidth_gbps == 2959.0 and measured.tensor_peak_tflops("bf16") == 783.0
    assert measured.tensor_peak_tflops("fp8") == datasheet.tensor_peak_tflops("fp8")  # not measured: datasheet
    assert "memory_bandwidth_gbps" in measured.overrides
    [(label, overlay)] = roofs.measured_overlay(datasheet, tmp_path)
    assert "measured" in label and overlay.bandwidth_gbps == 2959.0
    assert roofs.measured_overlay(get_spec("t4"), tmp_path) == []


def test_unknown_roof_choice():
    try:
        roofs.roof_spec(get_spec("t4"), "sparse")
    except UserError as error:
        assert "datasheet" in str(error) and "measured" in str(error)
    else:
        raise AssertionError("an unknown --roof must be a UserError")


def test_fma_kernel_computes_the_chain():
    # Under TRITON_INTERPRET=1 (conftest) the kernel runs on CPU tensors: the chain it times must be
    # the chain it claims, x <- a*x + b repeated, or the FLOP count is fiction.
    out = torch.empty(2 * ceiling_kernels.FMA_BLOCK)
    coef = torch.tensor([0.9999, 1e-4])
    ceiling_kernels.fma_chain(out, coef, iters=3, unroll=2)
    x = torch.arange(out.numel(), dtype=torch.float32) * 1e-7
    y = x + 0.5
    for _ in range(6):
        x, y = x * 0.9999 + 1e-4, y * 0.9999 + 1e-4
    torch.testing.assert_close(out, x + y, rtol=1e-6, atol=1e-6)
    assert ceiling_kernels.fma_flops(out.numel(), iters=3, unroll=2) == 2 * out.numel() * 2 * 6


def test_l2_copy_covers_every_block():
    src = torch.randn(5 * ceiling_kernels.L2_BLOCK)
    dst = torch.zeros_like(src)
    ceiling_kernels.l2_copy(src, dst, programs=5, passes=2)
    assert torch.equal(src, dst)


def test_graph_sizing():
    assert graph_timing.calls_per_graph(0.001) == graph_timing.MAX_CALLS
    assert graph_timing.calls_per_graph(0.5) == 4  # 2 ms of replay
    assert graph_timing.calls_per_graph(10.0) == 1
    assert graph_timing.replays_for(2.0) == 100  # 200 ms budget
    assert graph_timing.replays_for(1000.0) == graph_timing.MIN_REPLAYS


def test_ceilings_command_on_cpu(tmp_path):
    result = CliRunner().invoke(app, ["ceilings", "--device", "cpu", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    values = roofs.load_measured_ceilings("cpu", tmp_path)
    assert values["memory_bandwidth_gbps"] > 0 and values["tensor_fp32_tflops"] > 0


@pytest.fixture
def stored_cpu_ceilings(monkeypatch, tmp_path):
    """cpu_ceilings over a fake measurement that counts its calls, with the store in tmp_path."""
    monkeypatch.setenv("ROOFLINT_CACHE", str(tmp_path))
    monkeypatch.delenv("ROOFLINT_CPU_CEILINGS_CACHE", raising=False)
    monkeypatch.setattr(ceilings, "_CPU_SPEC", None)
    measured = []

    def measure():
        measured.append(1)
        spec = ceilings.measured_spec("cpu", "CPU (measured)", 20.0 + len(measured), {"tensor_fp32_tflops": 0.3}, "how")
        ceilings._CPU_SPEC = spec
        return spec

    monkeypatch.setattr(ceilings, "measure_cpu_ceilings", measure)
    yield measured, tmp_path / "ceilings"
    monkeypatch.setattr(ceilings, "_CPU_SPEC", None)


def _fresh_process(monkeypatch):
    monkeypatch.setattr(ceilings, "_CPU_SPEC", None)  # what a new process starts with


def test_a_cpu_run_reuses_this_host_s_measurement_of_the_last_ten_minutes(monkeypatch, stored_cpu_ceilings):
    measured, folder = stored_cpu_ceilings
    first = ceilings.cpu_ceilings()
    assert len(measured) == 1 and first.bandwidth_gbps == 21.0 and len(list(folder.glob("cpu-*.json"))) == 1
    _fresh_process(monkeypatch)
    again = ceilings.cpu_ceilings()
    assert len(measured) == 1 and again.bandwidth_gbps == 21.0
    assert "reused, measured at" in again.values["memory_bandwidth_gbps"].source


@pytest.mark.parametrize(
    "change",
    ["older than ten minutes", "measured in the future", "another torch", "switched off", "corrupt", "not finite"],
)
def test_a_cpu_measurement_is_taken_again_where_the_stored_one_does_not_serve(monkeypatch, stored_cpu_ceilings, change):
    measured, folder = stored_cpu_ceilings
    ceilings.cpu_ceilings()
    path = next(folder.glob("cpu-*.json"))
    stored = json.loads(path.read_text())
    if change == "older than ten minutes":
        stored["measured_at"] -= ceilings.CPU_CEILINGS_MAX_AGE_S + 1
    elif change == "measured in the future":
        stored["measured_at"] += 3600
    elif change == "another torch":
        stored["identity"]["torch"] = "0.0.1"
    elif change == "switched off":
        monkeypatch.setenv("ROOFLINT_CPU_CEILINGS_CACHE", "0")
    elif change == "not finite":
        stored["spec"]["values"]["memory_bandwidth_gbps"][0] = float("nan")
    path.write_text("{not json" if change == "corrupt" else json.dumps(stored))
    _fresh_process(monkeypatch)
    assert ceilings.cpu_ceilings().bandwidth_gbps == 22.0 and len(measured) == 2
