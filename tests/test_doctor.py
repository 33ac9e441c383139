"""`rooflint doctor`: the verdict from faked NVML and GPU measurements, and the real command on this box."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import FakeNvmlDevice

from rooflint.engine import doctor
from rooflint.engine.doctor import DoctorReport, diagnose, judge
from rooflint.engine.nvml import GpuProcess, Telemetry

HEALTHY = DoctorReport(
    gpu_name="NVIDIA H100 80GB HBM3",
    cuda_device="NVIDIA H100 80GB HBM3",
    max_sm_clock_mhz=1980,
    loaded_sm_clock_mhz=1965,
    timer_ms=0.700,
    do_bench_ms=0.705,
)


def test_a_healthy_gpu_is_fit():
    assert judge(HEALTHY) == []


def test_each_unfit_condition_is_its_own_reason():
    cases = {
        "throttled under load: SM clock 1300 MHz is under 90% of its 1980 MHz maximum": {"loaded_sm_clock_mhz": 1300},
        "thermal or hardware slowdown active: hw_thermal": {"loaded_reasons": ["sw_power_cap", "hw_thermal"]},
        "another process is using the GPU: pid 12 (3.0 GiB)": {"other_processes": ["pid 12 (3.0 GiB)"]},
        "disagree by 8.0% on a large copy": {"timer_ms": 0.756, "do_bench_ms": 0.700},
        "NVML cannot read the GPU": {"nvml_error": "NVML unavailable: no driver"},
    }
    for expected, change in cases.items():
        problems = judge(dataclasses.replace(HEALTHY, **change))
        assert len(problems) == 1 and expected in problems[0], (change, problems)
    assert judge(dataclasses.replace(HEALTHY, timer_ms=0.72, do_bench_ms=0.70)) == []  # 2.9%: within 5%
    assert judge(dataclasses.replace(HEALTHY, loaded_reasons=["sw_power_cap"])) == []  # the cap alone is normal


def test_the_power_cap_under_matmul_load_is_a_note_until_the_clock_falls_under_60_percent():
    # Measured: a healthy H200 under back-to-back bf16 matmuls at 1545 MHz, NVML giving sw_power_cap.
    capped = dataclasses.replace(HEALTHY, loaded_sm_clock_mhz=1545, loaded_reasons=["sw_power_cap"])
    capped.problems = judge(capped)
    assert capped.problems == [] and capped.exit_code == 0
    assert capped.verdict.startswith("fit to benchmark (at its power cap under matmul load: 1545 of 1980 MHz")
    # The throttled H100 of issue 11 sat at 390-1000 MHz: unfit, cap or not.
    slow = dataclasses.replace(HEALTHY, loaded_sm_clock_mhz=1000, loaded_reasons=["sw_power_cap"])
    assert judge(slow) == ["throttled under load: SM clock 1000 MHz is under 60% of its 1980 MHz maximum (power cap)"]
    # Slow with no reason given, or with another reason beside the cap: the 90% rule.
    for reasons in ([], ["sw_power_cap", "sync_boost"]):
        report = dataclasses.replace(HEALTHY, loaded_sm_clock_mhz=1545, loaded_reasons=reasons)
        assert judge(report) == ["throttled under load: SM clock 1545 MHz is under 90% of its 1980 MHz maximum"]


def test_without_an_nvml_maximum_the_datasheet_boost_clock_is_the_reference():
    report = dataclasses.replace(HEALTHY, max_sm_clock_mhz=math.nan, boost_clock_mhz=1980, loaded_sm_clock_mhz=1500)
    assert "1980 MHz maximum" in judge(report)[0]


def test_no_gpu_is_one_reason_and_exit_1():
    report = DoctorReport(nvml_error="NVML unavailable: NVML Shared Library Not Found")
    report.problems = judge(report)
    assert report.problems == ["no GPU found (NVML unavailable: NVML Shared Library Not Found)"]
    assert report.exit_code == 1 and report.verdict.startswith("unfit: no GPU found")
    assert DoctorReport().to_dict()["timer_ratio"] is None  # NaN is null in JSON


class FakeProbe:
    def __init__(self, loaded_mhz=1970.0, cuda="NVIDIA H100 80GB HBM3", timers=(0.70, 0.70), broken=False):
        self.loaded_mhz, self.cuda, self.timers, self.broken = loaded_mhz, cuda, timers, broken

    def cuda_device(self):
        return self.cuda

    def loaded(self, sampler):
        assert sampler.available  # the real sampler, over the fake device
        return Telemetry(sm_clock_mhz=self.loaded_mhz, sm_clock_min_mhz=self.loaded_mhz - 30, power_median_w=650)

    def datasheet(self):
        return 3350.0, 989.0, 1980.0, ""

    def copy_gbps(self):
        if self.broken:
            raise RuntimeError("CUDA error: out of memory")
        return 2900.0

    def matmul_bf16_tflops(self):
        return 700.0

    def timer_vs_do_bench(self):
        return self.timers


def test_diagnose_a_healthy_gpu():
    report = diagnose(FakeProbe(), FakeNvmlDevice())
    assert report.fit and report.exit_code == 0 and report.verdict == "fit to benchmark"
    assert report.driver_version == "550.54.15" and report.power_limit_w == 700 and report.ecc_enabled is None
    assert report.loaded_sm_clock_mhz == 1970 and report.copy_datasheet_gbps == 3350 and report.copy_gbps == 2900
    assert json.loads(json.dumps(report.to_dict()))["timer_ratio"] == 1.0


def test_diagnose_finds_throttling_slowdowns_other_processes_and_bad_timers():
    report = diagnose(
        FakeProbe(loaded_mhz=1000, timers=(0.80, 0.70)), FakeNvmlDevice([GpuProcess(9, 2**30)], reasons=0x1 | 0x40)
    )
    assert report.exit_code == 1 and len(report.problems) == 4
    assert report.idle_reasons == ["hw_thermal"] and report.other_processes == ["pid 9 (1.0 GiB)"]


def test_a_failed_measurement_is_a_note_not_a_crash():
    report = diagnose(FakeProbe(broken=True), FakeNvmlDevice())
    assert report.fit and math.isnan(report.copy_gbps)
    assert report.notes == ["copy ceiling not measured: RuntimeError: CUDA error: out of memory"]


def test_no_nvml_and_no_cuda_is_no_gpu():
    report = diagnose(FakeProbe(cuda=""), None)
    assert report.problems == ["no GPU found (NVML unavailable)"] and report.exit_code == 1


def _rooflint() -> str:
    beside = Path(sys.executable).parent / "rooflint"
    return str(beside) if beside.exists() else (shutil.which("rooflint") or "rooflint")


def test_installed_doctor_on_a_machine_without_a_gpu(tmp_path):
    if doctor.TorchProbe().cuda_device():
        pytest.skip("this machine has a GPU: the no-GPU path of the installed command cannot run here")
    saved = tmp_path / "doctor.json"
    env = {k: v for k, v in os.environ.items() if k != "ROOFLINT_DEBUG"}
    done = subprocess.run(
        [_rooflint(), "doctor", "--json", str(saved)], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in output
    verdicts = [line for line in output.splitlines() if line.startswith("verdict:")]
    assert len(verdicts) == 1 and verdicts[0].startswith("verdict: unfit: no GPU found")
    assert output.strip().splitlines()[-1] == verdicts[0]
    assert json.loads(saved.read_text())["fit"] is False


def test_doctor_command_renders_every_reading_and_ends_with_the_verdict(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from rooflint.cli.app import app

    unhealthy = FakeNvmlDevice([GpuProcess(9, 2**30)])
    monkeypatch.setattr(doctor, "diagnose", lambda probe: diagnose(FakeProbe(), unhealthy))
    saved = tmp_path / "out" / "doctor.json"
    result = CliRunner().invoke(app, ["doctor", "--json", str(saved)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and lines[-1] == "verdict: unfit: another process is using the GPU: pid 9 (1.0 GiB)"
    for reading in ("550.54.15", "1,970 MHz median", "2,900 GB/s = 87% of the datasheet's 3,350", "pid 9 (1.0 GiB)"):
        assert reading in result.output
    assert json.loads(saved.read_text())["other_processes"] == ["pid 9 (1.0 GiB)"]
    monkeypatch.setattr(doctor, "diagnose", lambda probe: diagnose(FakeProbe(), FakeNvmlDevice()))
    healthy = CliRunner().invoke(app, ["doctor"])
    assert healthy.exit_code == 0 and healthy.output.strip().splitlines()[-1] == "verdict: fit to benchmark"
