"""Each lint rule on a synthetic results file: a row that breaks the rule and a row that does not.

Every rule test asserts the rule fires on the bad row and stays quiet on the good one, so deleting
(or breaking) the rule fails its test.
"""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from rooflint.analysis.lint import Finding, Severity, format_findings, lint_file, lint_row, lint_text, recorded_spec
from rooflint.cli.app import app
from rooflint.core import roofs
from rooflint.core.specs import get_spec
from rooflint.outputs.results import ResultRow

H100 = get_spec("h100_sxm")  # 3350 GB/s, 989.5 TFLOP/s bf16 dense, 67 TFLOP/s fp32, 50 MiB L2
GiB = 2**30


def good_row(**changes) -> ResultRow:
    """A plausible H100 elementwise row: 1.5 GiB moved in 0.6 ms (about 80% of the 3350 GB/s roof)."""
    row = ResultRow(
        family="gelu",
        variant="triton",
        kind="triton",
        dtype="bf16",
        size="large",
        shape="rows=16384,cols=16384",
        status="ok",
        rel_error=1e-3,
        tolerance=1.6e-2,
        timing_mode="cuda_events",
        l2_flushed=True,
        n_samples=100,
        median_ms=0.6,
        p20_ms=0.595,
        p80_ms=0.607,
        cuda_flops=16384 * 16384 * 12.0,
        ideal_bytes=1.5 * GiB,
        compute_unit="cuda",
        precision="fp32",
        gpu="h100_sxm",
        device_name="NVIDIA H100 80GB HBM3",
        l2_bytes=50 * 2**20,
    )
    return dataclasses.replace(row, **changes)


def rules(findings: list[Finding]) -> set[str]:
    return {f.rule for f in findings}


def write_rows(tmp_path, rows: list[ResultRow], extra: dict | None = None):
    frame = pd.DataFrame([dataclasses.asdict(r) for r in rows])
    for column, values in (extra or {}).items():
        frame[column] = values
    path = tmp_path / "results.csv"
    frame.to_csv(path, index=False)
    return path


def test_good_row_is_clean():
    assert lint_row(good_row(), H100) == []


@pytest.mark.parametrize(
    "bad, rule, severity",
    [
        # 1.5 GiB in 0.3 ms is 5.4 TB/s on a 3.35 TB/s part.
        (dict(median_ms=0.3, p20_ms=0.298, p80_ms=0.302), "above_roof", "error"),
        # 20 MiB working set, under 2x the 50 MiB L2.
        (
            dict(ideal_bytes=20 * 2**20, cuda_flops=1e6, median_ms=0.02, p20_ms=0.0199, p80_ms=0.0201),
            "fits_in_cache",
            "warning",
        ),
        # 8 us of calls launched back to back from Python: under three 5 us launches.
        (
            dict(
                ideal_bytes=200 * 2**20,
                cuda_flops=1e3,
                median_ms=0.008,
                p20_ms=0.0079,
                p80_ms=0.0081,
                timing_mode="cuda_events_stream",
            ),
            "launch_bound",
            "warning",
        ),
        # bench marked it throttled: NVML saw a thermal slowdown.
        (dict(throttled=True, sm_clock_mhz=990.0, clock_event_reasons="sw_power_cap;hw_thermal"), "throttled", "error"),
        # p20..p80 = 0.10 ms around 0.6 ms: 17% spread.
        (dict(p20_ms=0.55, p80_ms=0.65), "noisy", "warning"),
        (dict(status="failed", rel_error=0.5, message="relative error 0.5 > 0.016"), "correctness_failed", "error"),
        # 600 ms for 1.5 GiB: 0.08% of the roof.
        (dict(median_ms=600.0, p20_ms=599.0, p80_ms=601.0), "far_below_roof", "info"),
    ],
)
def test_rule_fires_on_bad_row_only(tmp_path, bad, rule, severity):
    # Through a synthetic results CSV, as `rooflint lint` reads it.
    path = write_rows(tmp_path, [good_row(variant="good"), good_row(variant="bad", **bad)])
    by_variant = {row.variant: findings for row, findings in lint_file(path)}
    assert rule in rules(by_variant["bad"])
    assert next(f for f in by_variant["bad"] if f.rule == rule).severity == severity
    assert rule not in rules(by_variant["good"])


def test_above_roof_names_causes():
    finding = next(f for f in lint_row(good_row(median_ms=0.3), H100) if f.rule == "above_roof")
    assert "cache-resident" in finding.message and "FLOP or byte count" in finding.message


def test_above_roof_threshold_is_five_percent():
    floor_ms = 1.5 * GiB / 3350e9 * 1e3
    assert "above_roof" not in rules(lint_row(good_row(median_ms=floor_ms / 1.04), H100))
    assert "above_roof" in rules(lint_row(good_row(median_ms=floor_ms / 1.06), H100))


def test_tensor_flops_on_cuda_cores_are_above_roof():
    # 2*8192^3 FLOPs in 1.6 ms is 687 TFLOP/s: fine on tensor cores, impossible on CUDA cores.
    matmul = dict(cuda_flops=0.0, ideal_bytes=3 * 8192 * 8192 * 2, median_ms=1.6, p20_ms=1.59, p80_ms=1.61)
    tensor = good_row(tensor_flops=2 * 8192**3, compute_unit="tensor", precision="bf16", **matmul)
    assert "above_roof" not in rules(lint_row(tensor, H100))
    scalar = good_row(cuda_flops=2 * 8192**3, **{k: v for k, v in matmul.items() if k != "cuda_flops"})
    finding = next(f for f in lint_row(scalar, H100) if f.rule == "above_roof")
    assert "wrong unit or precision" in finding.message


def test_above_roof_judges_against_the_max_floor_not_the_sum():
    # Attention-like: 989.5 TFLOP of bf16 matmul (1 s at peak) and 33.5 TFLOP of fp32 softmax (0.5 s)
    # overlapped. The sum model would call anything under 1.5 s impossible; the hardware bound is 1 s.
    mixed = good_row(
        tensor_flops=989.5e12, cuda_flops=33.5e12, ideal_bytes=1e9, compute_unit="tensor", precision="bf16"
    )
    overlapped = dataclasses.replace(mixed, median_ms=1100.0, p20_ms=1099.0, p80_ms=1101.0)
    assert "above_roof" not in rules(lint_row(overlapped, H100))
    impossible = dataclasses.replace(mixed, median_ms=900.0, p20_ms=899.0, p80_ms=901.0)
    finding = next(f for f in lint_row(impossible, H100) if f.rule == "above_roof")
    assert finding.message.startswith("111%")  # 1 s floor over 0.9 s


def test_above_roof_against_measured_ceilings_uses_the_higher_bound(tmp_path):
    # rooflint's copy kernel reached 2959 GB/s; a better kernel at 3150 GB/s beats that by 6%, which
    # is no proof of an error while the datasheet says 3350. Far below roof still uses the measured roof.
    roofs.save_ceilings("h100_sxm", "H100", {"memory_bandwidth_gbps": 2959.0, "cuda_fp32_tflops": 60.0}, tmp_path)
    measured = roofs.roof_spec(H100, "measured", tmp_path)
    fast = 1.5 * GiB / 3150e9 * 1e3
    assert "above_roof" not in rules(lint_row(good_row(median_ms=fast, p20_ms=fast, p80_ms=fast), measured))
    faster = 1.5 * GiB / 3600e9 * 1e3  # past the datasheet too
    findings = lint_row(good_row(median_ms=faster, p20_ms=faster, p80_ms=faster), measured)
    assert "higher of its datasheet and measured" in next(f for f in findings if f.rule == "above_roof").message


def test_launch_bound_is_keyed_on_what_the_timing_mode_includes():
    short = dict(ideal_bytes=200 * 2**20, cuda_flops=1e3, median_ms=0.008, p20_ms=0.0079, p80_ms=0.0081)
    # Spin-separated events time the GPU alone: a short median says nothing about launches.
    assert "launch_bound" not in rules(lint_row(good_row(**short), H100))
    # Host launches are in a CPU wall-clock time and in an unstated (plain table) one.
    cpu = next(f for f in lint_row(good_row(timing_mode="cpu_wall", **short), H100) if f.rule == "launch_bound")
    assert "larger size" in cpu.message
    assert "launch_bound" in rules(lint_row(good_row(timing_mode="", **short), H100))
    # Where the overhead was measured it decides, whatever the mode.
    measured = good_row(launch_overhead_ms=0.02, **short)
    assert "launch_bound" in rules(lint_row(measured, H100))
    assert "launch_bound" not in rules(lint_row(dataclasses.replace(measured, launch_overhead_ms=0.001), H100))


def test_throttled_rule():
    # bench's verdict: the message names the clock and NVML's clock-event reasons.
    marked = good_row(throttled=True, throttle_retries=3, sm_clock_mhz=990.0, clock_event_reasons="hw_thermal")
    finding = next(f for f in lint_row(marked, H100) if f.rule == "throttled")
    assert finding.severity == Severity.ERROR
    assert "990 MHz" in finding.message and "hw_thermal" in finding.message and "3 re-timings" in finding.message
    # Today's schema: one sm_clock_mhz, judged against the H100's 1980 MHz boost clock.
    slow = next(f for f in lint_row(good_row(sm_clock_mhz=1000.0), H100) if f.rule == "throttled")
    assert "51% of the 1980 MHz boost clock" in slow.message and "no clock_event_reasons" in slow.message
    assert "throttled" not in rules(lint_row(good_row(sm_clock_mhz=1800.0), H100))  # 91%: healthy
    assert "throttled" not in rules(lint_row(good_row(sm_clock_mhz=math.nan), H100))  # not recorded
    # NVML sampled it: bench judged it against the clock this GPU held under load; that verdict stands.
    sampled = good_row(sm_clock_mhz=1500.0, sm_clock_min_mhz=1480.0, regime="burst")
    assert "throttled" not in rules(lint_row(sampled, H100))
    # Sustained rows run at the power cap by design.
    assert "throttled" not in rules(lint_row(good_row(sm_clock_mhz=1300.0, regime="sustained"), H100))


def test_shared_gpu_rule():
    shared = good_row(message="another process was using the GPU: pid 886 (1.0 GiB)")
    finding = next(f for f in lint_row(shared, H100) if f.rule == "shared_gpu")
    assert finding.severity == Severity.WARNING and "another process" in finding.message
    assert "shared_gpu" not in rules(lint_row(good_row(), H100))
    # A throttled row says so once, as the error.
    both = dataclasses.replace(shared, throttled=True, sm_clock_mhz=1500.0)
    assert "throttled" in rules(lint_row(both, H100)) and "shared_gpu" not in rules(lint_row(both, H100))


def test_throttled_rule_needs_a_boost_clock(tmp_path):
    spec_file = tmp_path / "mygpu.toml"
    spec_file.write_text('[mygpu]\nname = "My GPU"\nmemory_bandwidth_gbps = 3350\ncuda_fp32_tflops = 67\n')
    mine = get_spec("mygpu", spec_file)
    row = good_row(gpu="mygpu", device_name="My GPU", sm_clock_mhz=300.0)
    assert "throttled" not in rules(lint_row(row, mine, spec_by_key={"mygpu": mine}))
    assert "throttled" in rules(lint_row(dataclasses.replace(row, throttled=True), mine, spec_by_key={"mygpu": mine}))


def test_launch_bound_uses_measured_overhead_in_graph_mode():
    graphed = good_row(timing_mode="cuda_graph", median_ms=0.02, launch_overhead_ms=0.01, p20_ms=0.0199, p80_ms=0.0201)
    assert "launch_bound" in rules(lint_row(graphed, H100))
    assert "launch_bound" not in rules(lint_row(dataclasses.replace(graphed, launch_overhead_ms=0.001), H100))


def test_bytes_disagree_only_with_counters():
    row = good_row()
    assert "bytes_disagree" in rules(lint_row(row, H100, measured_dram_bytes=2.0 * GiB))  # 1.33x
    assert "bytes_disagree" not in rules(lint_row(row, H100, measured_dram_bytes=1.6 * GiB))  # 1.07x
    assert "bytes_disagree" not in rules(lint_row(row, H100))
    # A declared modeled traffic is what the counters are compared with.
    unfused = good_row(modeled_bytes=4.5 * GiB, median_ms=1.8, p20_ms=1.79, p80_ms=1.81)
    assert "bytes_disagree" not in rules(lint_row(unfused, H100, measured_dram_bytes=4.4 * GiB))


def test_wrong_gpu():
    t4 = get_spec("t4")
    finding = next(f for f in lint_row(good_row(median_ms=5.0, p20_ms=4.99, p80_ms=5.01), t4) if f.rule == "wrong_gpu")
    assert finding.severity == "error" and "--gpu h100_sxm" in finding.message
    assert "wrong_gpu" not in rules(lint_row(good_row(gpu="h100"), H100))  # an alias of the same GPU


def test_format_findings_most_severe_first():
    findings = [Finding("warning", "noisy", ""), Finding("error", "above_roof", ""), Finding("info", "far", "")]
    assert format_findings(findings) == "error:above_roof; warning:noisy; info:far"
    assert format_findings([]) == ""


def test_lint_file_reads_measured_dram_bytes_column(tmp_path):
    path = write_rows(tmp_path, [good_row(), good_row(variant="eager")], {"measured_dram_bytes": [2.0 * GiB, math.nan]})
    by_variant = {row.variant: rules(findings) for row, findings in lint_file(path)}
    assert "bytes_disagree" in by_variant["triton"] and "bytes_disagree" not in by_variant["eager"]


def test_cpu_rows_use_their_recorded_ceilings(tmp_path):
    cpu = good_row(
        gpu="cpu",
        device_name="cpu",
        timing_mode="cpu_wall",
        bandwidth_gbps=20.0,
        peak_tflops=0.1,
        median_ms=100.0,
        p20_ms=99.0,
        p80_ms=101.0,
        l2_bytes=32 * 2**20,
    )
    [(_, findings)] = lint_file(write_rows(tmp_path, [cpu]))
    assert "wrong_gpu" not in rules(findings) and "above_roof" not in rules(findings)
    fast = dataclasses.replace(cpu, median_ms=10.0, p20_ms=9.9, p80_ms=10.1)  # 161 GB/s on a 20 GB/s CPU
    [(_, findings)] = lint_file(write_rows(tmp_path, [fast]))
    assert "above_roof" in rules(findings)


# ------------------------------------------------------------------------------- plain CSV


PLAIN = """kernel,gpu,time_ms,flops,bytes,precision,compute_unit
honest_gemm,h100,1.8,1.1e12,4e8,bf16,tensor
sparse_peak_gemm,h100,0.5,1.1e12,4e8,bf16,tensor
scalar_claim,H100 SXM,1.0,5e11,1e9,fp32,cuda
"""


def test_plain_csv(tmp_path):
    path = tmp_path / "published.csv"
    path.write_text(PLAIN)
    by_kernel = {row.family: rules(findings) for row, findings in lint_file(path)}
    assert by_kernel["honest_gemm"] == set()
    assert "above_roof" in by_kernel["sparse_peak_gemm"]  # 2200 TFLOP/s bf16 on a 989.5 TFLOP/s part
    assert "above_roof" in by_kernel["scalar_claim"]  # 500 TFLOP/s on 67 TFLOP/s CUDA cores


def test_plain_csv_achieved_rates_only(tmp_path):
    path = tmp_path / "rates.csv"
    path.write_text(
        "kernel,gpu,achieved_gbps,achieved_tflops,precision,compute_unit\n"
        "copy,h100,4000,,,\nmm,h100,,700,bf16,tensor\nmm_fp8,h100,,2500,fp8,tensor\n"
    )
    by_kernel = {row.family: rules(findings) for row, findings in lint_file(path)}
    assert "above_roof" in by_kernel["copy"] and by_kernel["mm"] == set() and "above_roof" in by_kernel["mm_fp8"]


def test_plain_csv_compute_unit_aliases(tmp_path):
    # A published table names the column `unit` (or engine, pipe) and its values as it likes.
    path = tmp_path / "foreign.csv"
    path.write_text(
        "kernel,gpu,time_ms,flops,bytes,precision,unit\n"
        "gemm,h100,1.8,1.1e12,4e8,bf16,tensor_core\n"
        "sparse_gemm,h100,0.5,1.1e12,4e8,bf16,Tensor-Core\n"
        "scalar,h100,1.0,5e11,1e9,fp32,cuda_core\n"
        "simt_ok,h100,1.0,5e9,1e9,fp32,SIMT\n"
    )
    by_kernel = {row.family: (row.compute_unit, rules(findings)) for row, findings in lint_file(path)}
    assert by_kernel["gemm"] == ("tensor", set())
    assert by_kernel["sparse_gemm"][0] == "tensor" and "above_roof" in by_kernel["sparse_gemm"][1]
    assert by_kernel["scalar"][0] == "cuda" and "above_roof" in by_kernel["scalar"][1]
    assert by_kernel["simt_ok"] == ("cuda", set())
    engine = tmp_path / "engine.csv"
    engine.write_text("kernel,gpu,time_ms,flops,precision,engine\nmm,h100,1.8,1.1e12,bf16,mma\n")
    [(row, _)] = lint_file(engine)
    assert row.compute_unit == "tensor"


def test_plain_csv_wrong_gpu_via_option(tmp_path):
    path = tmp_path / "published.csv"
    path.write_text(PLAIN)
    assert all("wrong_gpu" in rules(f) for _, f in lint_file(path, gpu="a100_80gb_sxm"))


# ------------------------------------------------------------------------------------ CLI

runner = CliRunner()


def test_cli_exit_codes(tmp_path):
    clean = write_rows(tmp_path, [good_row()])
    result = runner.invoke(app, ["lint", str(clean)])
    assert result.exit_code == 0, result.output
    assert "clean" in result.output
    (tmp_path / "bad").mkdir()
    failing = write_rows(tmp_path / "bad", [good_row(median_ms=0.3, p20_ms=0.298, p80_ms=0.302)])
    result = runner.invoke(app, ["lint", str(failing)])
    assert result.exit_code == 1 and "above_roof" in result.output


def test_cli_bad_input(tmp_path):
    missing = runner.invoke(app, ["lint", str(tmp_path / "nope.csv")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    malformed = tmp_path / "bad.csv"
    malformed.write_text('a,b\n1,2,3,4\n"x')
    result = runner.invoke(app, ["lint", str(malformed)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1
    wrong = tmp_path / "plain.csv"
    wrong.write_text("kernel,gpu,time_ms,flops,precision,compute_unit\nk,h100,1.0,1e9,bf16,matrix\n")
    result = runner.invoke(app, ["lint", str(wrong)])
    assert result.exit_code == 2 and "compute_unit" in result.output
    unknown = runner.invoke(app, ["lint", str(write_rows(tmp_path, [good_row()])), "--gpu", "z80"])
    assert unknown.exit_code == 2 and "unknown GPU" in unknown.output


@pytest.mark.parametrize("unit", ["matrix", "fp32", ""])
def test_cli_wrong_compute_unit_lists_the_valid_ones_and_aliases(tmp_path, unit):
    # fp32 is a precision, not a unit: it does not say which cores did the work.
    wrong = tmp_path / "plain.csv"
    wrong.write_text(f"kernel,gpu,time_ms,flops,precision,unit\nk,h100,1.0,1e9,fp32,{unit}\n")
    result = runner.invoke(app, ["lint", str(wrong)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"unit {unit!r}" in result.output
    assert "valid: tensor (or tensor_core" in result.output and "cuda (or cuda_core" in result.output


def test_cli_negative_and_zero_plain_times(tmp_path):
    for text, column in (("-1.0", "time_ms"), ("0", "time")):
        bad = tmp_path / "plain.csv"
        bad.write_text(f"kernel,gpu,time_ms,bytes\nk,h100,{text},1e9\n")
        result = runner.invoke(app, ["lint", str(bad)])
        assert result.exit_code == 2 and column in result.output and "valid:" in result.output


def test_cli_bad_roof_is_refused_even_without_a_gpu_to_judge(tmp_path):
    cpu = good_row(gpu="cpu", device_name="cpu", status="skipped", median_ms=math.nan)
    result = runner.invoke(app, ["lint", str(write_rows(tmp_path, [cpu])), "--roof", "bogus"])
    assert result.exit_code == 2 and "valid: datasheet, measured" in result.output


def test_a_timed_cpu_row_without_ceilings_takes_those_its_run_recorded(tmp_path):
    # `rooflint model ... --device cpu` records the CPU's measured ceilings on its op rows but none on
    # the whole-generation row: lint judged that row against no spec and refused the whole file.
    recorded = dict(gpu="cpu", device_name="x86_64", timing_mode="cpu_wall", l2_bytes=32 * 2**20)
    op = good_row(bandwidth_gbps=20.0, peak_tflops=0.1, median_ms=100.0, p20_ms=99.0, p80_ms=101.0, **recorded)
    whole = dataclasses.replace(op, variant="generate", bandwidth_gbps=math.nan, peak_tflops=math.nan)
    by_variant = {row.variant: rules(findings) for row, findings in lint_file(write_rows(tmp_path, [op, whole]))}
    assert by_variant[op.variant] == by_variant["generate"]  # the same time and cost, the same roof
    assert "above_roof" not in by_variant["generate"]
    fast = dataclasses.replace(whole, median_ms=10.0, p20_ms=9.9, p80_ms=10.1)  # 161 GB/s on a 20 GB/s CPU
    by_variant = {row.variant: rules(findings) for row, findings in lint_file(write_rows(tmp_path, [op, fast]))}
    assert "above_roof" in by_variant["generate"]


def test_untimed_cpu_rows_need_no_ceilings(tmp_path):
    # bench records no ceilings on rows it never timed (skipped, failed): lint must still read them.
    skipped = good_row(gpu="cpu", device_name="x86_64", status="skipped", median_ms=math.nan, variant="triton")
    failed = good_row(gpu="cpu", device_name="x86_64", status="failed", median_ms=math.nan, rel_error=0.5)
    by_status = {row.status: rules(findings) for row, findings in lint_file(write_rows(tmp_path, [skipped, failed]))}
    assert by_status == {"skipped": set(), "failed": {"correctness_failed"}}


def test_lint_text_for_bench_uses_recorded_ceilings():
    # bench's CUDA path has no spec object in the parent: the row's recorded ceilings stand in.
    recorded = dict(bandwidth_gbps=3350.0, peak_tflops=67.0)
    assert lint_text(good_row(**recorded)) == ""
    assert lint_text(good_row(median_ms=0.3, p20_ms=0.299, p80_ms=0.301, **recorded)) == "error:above_roof"
    assert lint_text(good_row(status="skipped", median_ms=math.nan)) == ""  # nothing timed, nothing recorded


def test_zero_flop_rows_need_no_compute_ceiling():
    # A paged-KV gather moves bytes and does no arithmetic: bench records achieved_tflops 0 and no
    # compute peak. It has no compute roof to miss, so only the bandwidth roof judges it.
    gather = good_row(
        cuda_flops=0.0,
        achieved_tflops=0.0,
        peak_tflops=math.nan,
        bandwidth_gbps=3350.0,
        median_ms=0.6,
        ideal_bytes=1.5 * GiB,
    )
    assert lint_text(gather, None) == ""
    assert "no_ceiling" not in rules(lint_row(gather, H100))
    too_fast = dataclasses.replace(gather, median_ms=0.3)  # 5.4 TB/s on a 3.35 TB/s part
    assert "above_roof" in rules(lint_row(too_fast, H100))


def test_a_cache_resident_row_is_judged_on_compute_alone():
    # 24 MiB in 4 us is 6.3 TB/s, past the H100's DRAM roof, but it fits the 50 MiB L2: the DRAM
    # roof does not apply (fits_in_cache says so), so it is no proof of an impossible time.
    small = dict(ideal_bytes=24 * 2**20, cuda_flops=1e6, median_ms=0.004, p20_ms=0.004, p80_ms=0.004)
    found = rules(lint_row(good_row(**small), H100))
    assert "fits_in_cache" in found and "above_roof" not in found
    # Its compute floor still binds: 1 PFLOP/s of fp32 CUDA-core work is impossible, cache or not.
    impossible = lint_row(good_row(**{**small, "cuda_flops": 4e9}), H100)
    finding = next(f for f in impossible if f.rule == "above_roof")
    assert "a wrong unit or precision" in finding.message


def test_a_model_op_row_is_judged_by_the_working_set_of_one_call():
    # GPT-2's prefill residual adds: 24 calls of 37.7 MB each (read x and a, write x) sum to 905 MB,
    # far over the L2, but each call's inputs were just written and sit in the 50 MiB L2. 3.73 TB/s
    # is then a cache-resident op, not an impossible one; the same row as one 905 MB call is.
    op = dict(ideal_bytes=905969664.0, cuda_flops=1.5e8, median_ms=0.2428, p20_ms=0.2428, p80_ms=0.2428,
              timing_mode="profiler_device_kernels", message="share=2.3%; calls=24; top: add (100%)")  # fmt: skip
    found = rules(lint_row(good_row(**op), H100))
    assert "fits_in_cache" in found and "above_roof" not in found
    one_call = {**op, "message": "share=2.3%; calls=1; top: add (100%)"}
    assert "above_roof" in rules(lint_row(good_row(**one_call), H100))
    # a bench row never divides: its message is free text
    bench = {**op, "timing_mode": "cuda_events"}
    assert "above_roof" in rules(lint_row(good_row(**bench), H100))


def test_clock_mismatch_rule(tmp_path):
    # gelu's baseline is `eager`. A speedup near 1.0x across clocks 7% apart is flagged; one across
    # clocks 1% apart, one far from 1.0x, and rows without their baseline in the file are not.
    def timed(variant, clock, speedup, **changes):
        return good_row(variant=variant, sm_clock_mhz=clock, speedup_vs_eager=speedup, **changes)

    rows = [
        timed("eager", 1980.0, 1.0),
        timed("triton", 1845.0, 0.979),  # 7% apart, within twice that of 1.0x: flagged
        timed("cuda", 1960.0, 0.98),  # 1% apart: the clocks cannot explain much
        timed("eager_unfused", 1845.0, 0.5),  # 7% apart, but 0.5x is the kernels
        timed("triton", 1700.0, 1.01, shape="rows=8192,cols=8192"),  # no baseline row at this shape
        timed("triton", 1700.0, 1.0, family="not_a_family"),  # no registered family: no baseline known
    ]
    flagged = [(row.variant, row.shape, row.family) for row, findings in lint_file(write_rows(tmp_path, rows))
               if "clock_mismatch" in rules(findings)]  # fmt: skip
    assert flagged == [("triton", "rows=16384,cols=16384", "gelu")]
    finding = next(f for _, fs in lint_file(write_rows(tmp_path, rows)) for f in fs if f.rule == "clock_mismatch")
    assert finding.severity == Severity.WARNING
    assert "1845 MHz" in finding.message and "eager at 1980 MHz" in finding.message and "0.979x" in finding.message


def test_clock_mismatch_is_quiet_where_both_rows_ran_sustained(tmp_path):
    # At the power cap each kernel's clock is its own doing: no warning between two sustained rows,
    # but a sustained row against a burst baseline (or the reverse) is still flagged.
    def timed(variant, clock, speedup, regime, **changes):
        return good_row(variant=variant, sm_clock_mhz=clock, speedup_vs_eager=speedup, regime=regime, **changes)

    shape = "rows=8192,cols=8192"
    rows = [
        timed("eager", 1770.0, 1.0, "sustained"),
        timed("triton", 1620.0, 1.0, "sustained"),  # 9% apart, both at the cap: quiet
        timed("eager", 1980.0, 1.0, "burst", shape=shape),
        timed("triton", 1800.0, 1.01, "sustained", shape=shape),  # against a burst baseline: flagged
    ]
    flagged = [(row.variant, row.shape) for row, findings in lint_file(write_rows(tmp_path, rows))
               if "clock_mismatch" in rules(findings)]  # fmt: skip
    assert flagged == [("triton", shape)]


def test_clock_mismatch_through_the_console_script(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    rows = [good_row(variant="eager", sm_clock_mhz=1980.0, speedup_vs_eager=1.0),
            good_row(variant="triton", sm_clock_mhz=1800.0, speedup_vs_eager=1.02)]  # fmt: skip
    path = write_rows(tmp_path, rows)
    script = Path(sys.executable).parent / "rooflint"
    done = subprocess.run([str(script), "lint", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr  # a warning, not an error
    assert "clock_mismatch" in done.stdout


def test_above_roof_on_measured_ceilings_names_a_busy_machine():
    # A CPU row judged on ceilings measured at its run's start (10 GB/s): 2.7 TB/s is impossible, and
    # a machine busy while the ceilings were measured is among the causes; a datasheet roof never says so.
    cpu = good_row(gpu="cpu", device_name="x86_64", ceiling_source="measured", bandwidth_gbps=10.0, peak_tflops=0.1,
                   cuda_peak_tflops=0.1, timing_mode="cpu_wall", l2_flushed=False)  # fmt: skip
    finding = next(f for f in lint_row(cpu, recorded_spec(cpu)) if f.rule == "above_roof")
    assert "measured while the machine was busy" in finding.message
    datasheet = next(f for f in lint_row(good_row(median_ms=0.06), H100) if f.rule == "above_roof")
    assert "busy" not in datasheet.message
    # An H100's measured ceilings are judged with its datasheet under them: a busy measurement
    # cannot lower that roof, so it is not named.
    gpu = good_row(median_ms=0.06, ceiling_source="measured", bandwidth_gbps=2900.0, peak_tflops=60.0,
                   cuda_peak_tflops=60.0)  # fmt: skip
    raised = next(f for f in lint_row(gpu, recorded_spec(gpu)) if f.rule == "above_roof")
    assert "the higher of its datasheet and measured ceilings" in raised.message
    assert "busy" not in raised.message


def test_power_capped_rule_is_info_and_never_the_throttled_error():
    """A compute-bound row bench kept at its power cap by its own load (engine/throttle.py): an info
    finding that says so, no throttled error, although its NVML clock sits well under the reference."""
    capped = good_row(
        sm_clock_mhz=1530.0, sm_clock_min_mhz=1515.0, regime="burst", throttle_retries=1,
        clock_event_reasons="sw_power_cap", message="at its power cap by its own load: compute-bound work ...",
    )  # fmt: skip
    findings = lint_row(capped, H100)
    finding = next(f for f in findings if f.rule == "power_capped")
    assert finding.severity == Severity.INFO and "its own compute-bound load" in finding.message
    assert "throttled" not in rules(findings)
    assert "power_capped" not in rules(lint_row(good_row(), H100))
    # marked throttled, the error stands and the info is not added
    assert "power_capped" not in rules(lint_row(dataclasses.replace(capped, throttled=True), H100))
