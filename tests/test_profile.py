"""rooflint profile: the ncu CSV parser on a CSV recorded on the H100, kernel lists on the CPU."""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflint.analysis import limiter, ncu
from rooflint.analysis.lint import lint_file
from rooflint.cli.app import app
from rooflint.core.errors import UserError
from rooflint.core.registry import get_family
from rooflint.core.specs import get_spec
from rooflint.engine.profile import kernel_shares, ncu_row, plot_ncu, read_ncu_csv

# Recorded on the H100 with `ncu --nvtx --nvtx-include calib/ ...` then
# `ncu --import calib.ncu-rep --csv --page raw --print-units base` (scripts/dev/measurement.py, removed;
# see git show bf7de4a:scripts/dev/measurement.py):
# a 4096^3 bf16 torch.mm and a torch.addcmul over 2^24 fp32 values, inside one NVTX range.
RECORDED = Path(__file__).parent / "data" / "ncu_h100_calib.csv"
runner = CliRunner()


def test_parse_recorded_ncu_csv():
    kernels = ncu.read_raw_csv(RECORDED)
    assert [k.name.split("_")[0] for k in kernels] == ["nvjet", "void at::vectorized"]
    mm, addcmul = kernels
    # Thousands separators are stripped and base units kept: bytes, not Mbyte.
    assert mm.values[ncu.DRAM_READ] == 150_489_344
    assert addcmul.values[ncu.DRAM_READ] == 67_119_360  # x (64 MiB) read once: the right answer
    assert addcmul.values["sm__sass_thread_inst_executed_op_ffma_pred_on.sum"] == 2**24  # one FFMA an element


def test_aggregate_recorded_counters():
    measured = ncu.aggregate(ncu.read_raw_csv(RECORDED))
    assert measured.kernels == 2
    assert measured.tensor_ops == 2 * 4096**3  # the by-source tensor counter is FLOPs, FMA = 2
    assert measured.cuda_flops == 2 * 2**24
    assert measured.dram_bytes == 150_489_344 + 67_119_360 + 28_218_880 + 46_601_728
    assert measured.duration_ms == pytest.approx((207_584 + 41_568) / 1e6)
    assert measured.notes == []


def test_tensor_metric_selection_avoids_double_counting():
    assert ncu.is_tensor_flop_metric("sm__ops_path_tensor_src_bf16_dst_fp32.sum")
    assert ncu.is_tensor_flop_metric("sm__ops_path_tensor_src_fp8")
    for name in (
        "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum",  # per instruction: same ops again
        "sm__ops_path_tensor_src_fp8_sparsity_off.sum",  # split by sparsity: same ops again
        "sm__ops_path_tensor_src_int8.sum",  # integer MMA is not FLOPs
        "sm__ops_path_tensor_src_bf16_dst_fp32.avg",
    ):
        assert not ncu.is_tensor_flop_metric(name), name
    available = ["sm__ops_path_tensor_src_fp16", "sm__ops_path_tensor_op_hmma_src_fp16", "dram__bytes_read"]
    assert ncu.tensor_metrics(available) == ["sm__ops_path_tensor_src_fp16.sum"]


def test_parse_query_metrics():
    text = (
        "Device GH100\n-----\nMetric Name   Metric Type   Metric Unit   Metric Description\n"
        "sm__ops_path_tensor_src_fp16          Counter         # of math ops executed in Tensor path\n"
        "dram__bytes_read                      Counter   byte  # of bytes read from DRAM\n"
    )
    assert ncu.parse_query_metrics(text) == ["sm__ops_path_tensor_src_fp16", "dram__bytes_read"]


def test_parser_skips_prof_lines_and_rejects_empty_output():
    text = "==PROF== Connected to process 1\n" + RECORDED.read_text()
    assert len(ncu.parse_raw_csv(text)) == 2
    with pytest.raises(UserError, match="no kernel matched"):
        ncu.parse_raw_csv("==PROF== Disconnected from process 1\n")


def test_ncu_command_filters_the_nested_nvtx_range(tmp_path):
    filt = ncu.nvtx_filter("softmax", "triton", "bf16", "large")
    assert filt == "softmax/triton/bf16/large/"
    command = ncu.profile_command("ncu", tmp_path / "r", filt, ncu.BASE_METRICS, ["python", "x.py"])
    assert command[command.index("--nvtx-include") + 1] == filt and "--nvtx" in command
    assert ncu.DRAM_READ in command[command.index("--metrics") + 1]
    assert command[-2:] == ["python", "x.py"]
    # ncu would otherwise lock the (possibly shared) GPU's clocks at base for the session
    assert command[command.index("--clock-control") + 1] == "none"


def test_ncu_row_falls_back_to_analytic_flops_and_says_so():
    family = get_family("vector_add")
    variant = family.variants["eager"]
    n = family.sizes["large"][0]["n"]
    counters = [ncu.KernelCounters("add", {ncu.DRAM_READ: 4.0 * n, ncu.DRAM_WRITE: 2.0 * n, ncu.L2_BYTES: 6.0 * n})]
    row = ncu_row(family, variant, "bf16", "large", counters, time_ms=0.5)
    assert row.flops_source == "analytic" and "analytic FLOPs" in row.notes
    assert row.measured_flops == n and row.bytes_ratio == pytest.approx(1.0)
    assert row.measured_ai == pytest.approx(n / (6.0 * n))


def test_ncu_csv_round_trip_plot_and_lint_counters(tmp_path):
    family = get_family("vector_add")
    n = family.sizes["large"][0]["n"]
    counters = [
        ncu.KernelCounters(
            "add",
            {ncu.DRAM_READ: 6.0 * n, ncu.DRAM_WRITE: 2.0 * n, limiter.DURATION: 5e5, limiter.DRAM_PCT: 91.0},
        )
    ]
    row = ncu_row(family, family.variants["eager"], "bf16", "large", counters, time_ms=0.5)
    assert (row.main_kernel, row.limiter) == ("add", "DRAM bound (91% of peak)")
    path = tmp_path / "ncu.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(dataclasses.asdict(row)))
        writer.writeheader()
        writer.writerow(dataclasses.asdict(row))
    [back] = read_ncu_csv(path)
    for name, value in dataclasses.asdict(row).items():
        got = getattr(back, name)
        assert got == value or (isinstance(value, float) and math.isnan(value) and math.isnan(got)), name
    written = plot_ncu([back], get_spec("h100_sxm"), tmp_path / "roofline_ncu")
    assert all(p.exists() for p in written)
    # The same CSV feeds lint's bytes-disagree rule: 8n bytes measured against 6n modeled.
    results = tmp_path / "results.csv"
    results.write_text(
        "family,variant,kind,dtype,size,shape,status,median_ms,ideal_bytes,cuda_flops,gpu\n"
        f"vector_add,eager,eager,bf16,large,{row.shape},ok,0.6,{6 * n},{n},h100_sxm\n"
    )
    [(_, findings)] = lint_file(results, counters=path)
    assert "bytes_disagree" in {f.rule for f in findings}


def test_ncu_row_says_how_many_l2_bytes_each_byte_the_sms_received_took():
    # FA4's K/V reads on an H200: 8.72 GB reached the SMs from 4.45 GB at the L2 slices (reads of the
    # same lines by several SMs served once); cuda_hopper's took 8.56 GB.
    family = get_family("vector_add")
    variant = family.variants["eager"]
    for l2, delivered, want in ((4.45e9, 8.72e9, 0.5103), (8.56e9, 8.72e9, 0.9817)):
        counters = [ncu.KernelCounters("k", {ncu.L2_BYTES: l2, ncu.SM_FROM_L2: delivered})]
        assert ncu_row(family, variant, "bf16", "large", counters, 1.0).l2_per_sm_byte == pytest.approx(want, abs=1e-4)
    without = ncu_row(family, variant, "bf16", "large", [ncu.KernelCounters("k", {ncu.L2_BYTES: 1.0})], 1.0)
    assert math.isnan(without.l2_per_sm_byte)  # a GPU whose ncu has no crossbar counter
    assert ncu.delivery_metrics(["l1tex__m_xbar2l1tex_read_bytes", "lts__t_bytes"]) == [ncu.SM_FROM_L2]
    assert ncu.delivery_metrics(["lts__t_bytes"]) == []


def test_an_ncu_csv_from_before_the_l2_column_still_reads_and_a_torn_one_does_not(tmp_path):
    family = get_family("vector_add")
    row = ncu_row(family, family.variants["eager"], "bf16", "large", [ncu.KernelCounters("k", {})], 1.0)
    record = dataclasses.asdict(row)
    del record["l2_per_sm_byte"]
    path = tmp_path / "old.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(record))
        writer.writeheader()
        writer.writerow(record)
    [back] = read_ncu_csv(path)
    assert back.variant == "eager" and math.isnan(back.l2_per_sm_byte)
    del record["limiter"]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(record))
        writer.writeheader()
        writer.writerow(record)
    with pytest.raises(UserError, match="missing columns limiter"):
        read_ncu_csv(path)


def test_kernel_shares_show_fusion_on_cpu():
    family = get_family("softmax")
    shares = {}
    for name in ("eager", "eager_unfused"):
        case = family.build_case("custom", {"rows": 8, "cols": 64}, "fp32", __import__("torch").device("cpu"))
        shares[name] = kernel_shares(family.variants[name].build(case), "cpu", name, calls=2)
    assert len(shares["eager_unfused"]) > len(shares["eager"]) == 1
    assert sum(s.share_pct for s in shares["eager_unfused"]) == pytest.approx(100.0)
    assert all(s.calls_per_call == 1 for s in shares["eager_unfused"])


def test_profile_command_on_cpu(tmp_path):
    result = runner.invoke(
        app,
        ["profile", "softmax", "-V", "eager", "--size", "rows=4,cols=32", "--device", "cpu", "--out", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    assert "aten::softmax" in (tmp_path / "kernels.csv").read_text()
    assert "softmax bf16 rows=4,cols=32: kernels per call on cpu" in " ".join(result.output.split())


def test_profile_bad_input(tmp_path):
    no_gpu = runner.invoke(app, ["profile", "softmax", "--device", "cpu", "--ncu", "--out", str(tmp_path)])
    assert no_gpu.exit_code == 2 and "--ncu needs a CUDA GPU" in no_gpu.output
    unknown = runner.invoke(app, ["profile", "nope", "--device", "cpu", "--out", str(tmp_path)])
    assert unknown.exit_code == 2 and "unknown family" in unknown.output
    variant = runner.invoke(app, ["profile", "softmax", "-V", "fused9", "--device", "cpu", "--out", str(tmp_path)])
    assert variant.exit_code == 2 and "unknown variant" in variant.output
    gpu_only = runner.invoke(app, ["profile", "softmax", "-V", "cuda", "--device", "cpu", "--out", str(tmp_path)])
    assert gpu_only.exit_code == 2 and "no variant of softmax can run on cpu" in gpu_only.output
    dtype = runner.invoke(app, ["profile", "softmax", "--dtype", "fp64", "--device", "cpu", "--out", str(tmp_path)])
    assert dtype.exit_code == 2 and "softmax has no dtype 'fp64'" in dtype.output
    assert not (tmp_path / "kernels.csv").exists()  # bad input is found before anything runs or is written


def test_profile_ncu_builds_each_variant_once_and_times_it_outside_ncu(tmp_path, monkeypatch):
    # With --ncu, each variant is built once here: its kernel list and its time come from the same
    # build; only ncu's child process builds it again (it must: it runs under the profiler).
    from rooflint.engine import profile, timing
    from rooflint.engine.timing import summarize

    built, timed, profiled = [], [], []
    real_build = profile.build
    monkeypatch.setattr(profile.torch.cuda, "is_available", lambda: True)  # a GPU, as resolve_device reads it
    monkeypatch.setattr("rooflint.engine.worker.missing_requirement", lambda variant, device: None)
    monkeypatch.setattr("rooflint.core.specs.current_gpu_spec", lambda spec_file=None, gpu=None: get_spec("h100"))
    monkeypatch.setattr(profile, "build", lambda fam, v, size, dtype, device: built.append(v.name)
                        or real_build(fam, v, size, dtype, "cpu"))  # fmt: skip
    monkeypatch.setattr(profile, "kernel_shares", lambda fn, device, name: [])
    monkeypatch.setattr(
        timing, "time_cuda", lambda fn, l2_bytes: timed.append(fn) or summarize([1.0], "cuda_events", True)
    )
    monkeypatch.setattr(profile.torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(
        profile, "available_metrics", lambda: ["dram__throughput", "sm__pipe_tensor_op_hmma_cycles_active"]
    )
    monkeypatch.setattr(profile.ncu_tools, "ncu_path", lambda: "/usr/local/cuda/bin/ncu")  # run_ncu is faked
    asked = []
    monkeypatch.setattr(
        profile,
        "run_ncu",
        lambda fam, v, dtype, size, out, metrics, sass=False: (
            asked.append(metrics) or profiled.append(v.name) or ([], None)
        ),
    )
    monkeypatch.setattr(profile, "ncu_row", lambda fam, v, dtype, size, counters, time_ms: (v.name, time_ms))
    monkeypatch.setattr(profile, "write_typed_csv", lambda rows, path, cls: path)
    monkeypatch.setattr(profile, "plot_ncu", lambda rows, spec, base, extra: [base.with_suffix(".png")])
    outcome = profile.run_profile("vector_add", ["eager", "triton"], ncu=True, out=tmp_path)
    assert tmp_path / "roofline_ncu.png" in outcome.written  # the ncu roofline, with or without --sass
    assert not outcome.sass and tmp_path / "sass.csv" not in outcome.written
    assert built == ["eager", "triton"] and len(timed) == 2  # one build per variant, each timed once
    assert profiled == ["eager", "triton"]
    assert outcome.ncu_rows == [("eager", 1.0), ("triton", 1.0)]
    # The limiter's counters ride along, each once, only those this ncu offers (plus launch attributes).
    metrics = asked[0]
    assert len(metrics) == len(set(metrics)) and ncu.DRAM_READ in metrics and limiter.DRAM_PCT in metrics
    assert "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active" in metrics
    assert limiter.REGISTERS in metrics and limiter.ISSUE_PCT not in metrics


def test_profile_sass_keeps_each_variant_s_main_kernel_and_writes_sass_csv(tmp_path, monkeypatch):
    from pathlib import Path

    from rooflint.analysis import sass
    from rooflint.engine import profile, timing
    from rooflint.engine.timing import summarize

    page = sass.parse_source_csv((Path(__file__).parent / "fixtures" / "ncu_source_sass.csv").read_text())
    monkeypatch.setattr(profile.torch.cuda, "is_available", lambda: True)  # a GPU, as resolve_device reads it
    monkeypatch.setattr("rooflint.engine.worker.missing_requirement", lambda variant, device: None)
    monkeypatch.setattr("rooflint.core.specs.current_gpu_spec", lambda spec_file=None, gpu=None: get_spec("h100"))
    monkeypatch.setattr(profile, "kernel_shares", lambda fn, device, name: [])
    monkeypatch.setattr(timing, "time_cuda", lambda fn, l2_bytes: summarize([1.0], "cuda_events", True))
    monkeypatch.setattr(profile.torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(profile, "available_metrics", lambda: [])
    monkeypatch.setattr(profile.ncu_tools, "ncu_path", lambda: "/usr/local/cuda/bin/ncu")  # run_ncu is faked
    real_build = profile.build
    monkeypatch.setattr(profile, "build", lambda fam, v, size, dtype, device: real_build(fam, v, size, dtype, "cpu"))
    asked = []
    monkeypatch.setattr(
        profile,
        "run_ncu",
        lambda fam, v, dtype, size, out, metrics, sass=False: asked.append(sass) or ([], sass and page[0]),
    )
    monkeypatch.setattr(profile, "ncu_row", lambda fam, v, dtype, size, counters, time_ms: (v.name, time_ms))
    written = {}
    monkeypatch.setattr(profile, "write_typed_csv", lambda rows, path, cls: written.update({path.name: rows}) or path)
    monkeypatch.setattr(profile, "plot_ncu", lambda rows, spec, base, extra: [])
    outcome = profile.run_profile("vector_add", ["triton", "eager"], ncu=True, sass=True, out=tmp_path)
    assert asked == [True, True]
    # The variants in the order asked: the first named is the one the others are compared against.
    assert list(outcome.sass) == ["triton", "eager"] and outcome.sass["triton"] is page[0]
    assert {r.variant for r in written["sass.csv"]} == {"eager", "triton"}


def test_profile_ncu_prints_what_limits_each_variant(tmp_path, monkeypatch):
    from rooflint.engine import profile

    family = get_family("vector_add")
    stalled = {limiter.DURATION: 4e5, limiter.DRAM_PCT: 52.0, limiter.OCCUPANCY_PCT: 31.0}
    stalled[limiter.stall_metric("long_scoreboard")] = 6.25
    row = ncu_row(family, family.variants["eager"], "bf16", "large", [ncu.KernelCounters("add", stalled)], 0.4)
    outcome = profile.ProfileOutcome("vector_add", "bf16", "large", "cuda", [], ncu_rows=[row])
    monkeypatch.setattr(profile, "run_profile", lambda *args, **kwargs: outcome)
    result = runner.invoke(app, ["profile", "vector_add", "--ncu", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "what limits each variant" in result.output and "long_scoreboard 6.25" in result.output
    verdict = "latency: no unit above 60% (busiest DRAM 52%); warps wait most on long_scoreboard"
    assert f"eager: {verdict} (6.25 cycles an instruction), occupancy 31%" in result.output.splitlines()
