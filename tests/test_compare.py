"""rooflint compare: classification with noise, failures, missing rows, GPU mismatch and the CI exit code."""

from __future__ import annotations

import math

import pytest
from result_factory import row, run, write
from typer.testing import CliRunner

from rooflint.analysis.compare import (
    BASE_ONLY,
    FASTER,
    FIXED,
    NEW_ONLY,
    NOISY,
    NOW_FAILING,
    NOW_MISSING,
    SAME,
    SLOWER,
    STILL_FAILING,
    UNTRUSTED,
    Measured,
    classify,
    compare_frames,
    parse_threshold,
)
from rooflint.cli.app import app
from rooflint.core.errors import UserError
from rooflint.outputs.results import read_results

runner = CliRunner()


def timing(median: float, spread: float = 0.01, status: str = "ok", throttled: str = "") -> Measured:
    return Measured(status, median, median * (1 - spread), median * (1 + spread), throttled=throttled)


@pytest.mark.parametrize(
    "base, new, verdict, change",
    [
        (timing(1.0), timing(1.04), SAME, 0.04),  # inside the 5% threshold
        (timing(1.0), timing(0.96), SAME, -0.04),
        (timing(1.0), timing(1.20), SLOWER, 0.20),  # [1.188, 1.212] vs [0.99, 1.01]: separated
        (timing(1.0), timing(0.80), FASTER, -0.20),
        # Past the threshold but each run jitters +-15%: new p20 = 1.02 < base p80 = 1.15, so noise.
        (timing(1.0, 0.15), timing(1.20, 0.15), NOISY, 0.20),
        (timing(1.0, 0.15), timing(0.80, 0.15), NOISY, -0.20),
        # Without a spread (one sample) the threshold alone decides.
        (Measured("ok", 1.0, math.nan, math.nan), Measured("ok", 1.06, math.nan, math.nan), SLOWER, 0.06),
    ],
)
def test_classify_uses_threshold_and_both_spreads(base, new, verdict, change):
    got, got_change = classify(base, new, 0.05)
    assert got == verdict
    assert got_change == pytest.approx(change)


def test_classify_never_calls_a_throttled_pair_faster_or_slower():
    for base, new in ((timing(1.0), timing(1.5, throttled="hot")), (timing(1.0, throttled="hot"), timing(0.5))):
        verdict, change = classify(base, new, 0.05)
        assert verdict == UNTRUSTED and math.isfinite(change)
    # A status change is no timing: a throttled row that now fails is still a regression.
    assert classify(timing(1.0, throttled="hot"), Measured("failed", math.nan, math.nan, math.nan), 0.05)[0] == (
        NOW_FAILING
    )


def test_classify_status_changes():
    ok, failed = timing(1.0), Measured("failed", math.nan, math.nan, math.nan)
    assert classify(ok, failed, 0.05)[0] == NOW_FAILING
    assert classify(ok, Measured("skipped", math.nan, math.nan, math.nan), 0.05)[0] == NOW_FAILING
    assert classify(failed, ok, 0.05)[0] == FIXED
    assert classify(failed, failed, 0.05)[0] == STILL_FAILING


@pytest.mark.parametrize("text, value", [("5%", 0.05), ("5", 0.05), ("2.5 %", 0.025), (10, 0.10)])
def test_parse_threshold(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["abc", "0", "-5%", "5%%", "2000%"])
def test_parse_threshold_rejects(text):
    with pytest.raises(UserError, match="threshold"):
        parse_threshold(text)


def test_missing_rows_are_listed_on_both_sides(tmp_path):
    base_rows = run()
    new_rows = run()[:2]  # NEW ran vector_add only: softmax is not its business
    new_rows.append(run()[0])
    new_rows[-1].variant = "cuda"  # and a new variant appeared
    base = read_results(write(base_rows, tmp_path / "base"))
    new = read_results(write(new_rows, tmp_path / "new"))
    result = compare_frames(base, new, 0.05)
    verdicts = {(e.family, e.variant): e.verdict for e in result.entries}
    assert verdicts[("softmax", "triton")] == BASE_ONLY
    assert verdicts[("vector_add", "cuda")] == NEW_ONLY
    assert not result.regressions
    text = result.to_markdown()
    assert "2 rows only in `BASE`" in text and "softmax / triton / bf16" in text
    assert "1 row only in `NEW`" in text and "vector_add / cuda" in text


def test_an_ok_variant_missing_from_a_family_new_ran_is_a_regression(tmp_path):
    base = read_results(write(run(), tmp_path / "base"))
    new = read_results(write(run()[:3], tmp_path / "new"))  # softmax ran, but its triton row vanished
    result = compare_frames(base, new, 0.05)
    verdicts = {(e.family, e.variant): e.verdict for e in result.entries}
    assert verdicts[("softmax", "triton")] == NOW_MISSING
    assert [(e.family, e.variant) for e in result.regressions] == [("softmax", "triton")]
    assert "**now missing**" in result.to_markdown()


def test_gpu_mismatch_is_refused_unless_allowed(tmp_path):
    base = write(run("h100_sxm"), tmp_path / "h100")
    new = write(run("a100_80gb_sxm", slower_gpu=1.6), tmp_path / "a100")
    result = runner.invoke(app, ["compare", str(base), str(new)])
    assert result.exit_code == 2
    assert "h100_sxm" in result.output and "a100_80gb_sxm" in result.output
    assert "--allow-gpu-mismatch" in result.output
    assert "Traceback" not in result.output

    allowed = runner.invoke(app, ["compare", str(base), str(new), "--allow-gpu-mismatch"])
    assert allowed.exit_code == 1  # every row is 60% slower on the smaller GPU
    assert "h100_sxm -> a100_80gb_sxm" in allowed.output
    assert "different GPUs compared on request" in allowed.output


def test_overlapping_gpu_sets_compare_only_the_shared_gpu(tmp_path):
    base = read_results(write(run("h100_sxm") + run("a100_80gb_sxm", slower_gpu=1.6), tmp_path / "base"))
    new = read_results(write(run("h100_sxm"), tmp_path / "new"))
    result = compare_frames(base, new, 0.05)
    assert {e.gpu for e in result.entries if e.verdict == SAME} == {"h100_sxm"}
    assert {e.gpu for e in result.entries if e.verdict == BASE_ONLY} == {"a100_80gb_sxm"}
    assert result.count(BASE_ONLY) == 4
    assert "only rows of the same GPU are compared" in result.to_markdown()


def test_planted_20_percent_regression_fails_the_build(tmp_path):
    base = write(run(), tmp_path / "base")
    new = write(run(scale=1.2), tmp_path / "new")  # both triton variants 20% slower
    diff = tmp_path / "diff.md"
    result = runner.invoke(app, ["compare", str(base), str(new), "--threshold", "5%", "--out", str(diff)])
    assert result.exit_code == 1
    assert "FAIL, 2 regressions past 5%" in result.output
    lines = [line for line in diff.read_text().splitlines() if "**slower**" in line]
    assert len(lines) == 2
    assert all("| triton |" in line and "+20.0%" in line for line in lines)
    folded = diff.read_text().split("<details><summary>2 rows within 5%</summary>")[1]
    assert folded.count("| eager |") == 2 and "| same |" in folded  # unchanged rows fold away

    # A threshold above the change passes, and the same file against itself passes.
    assert runner.invoke(app, ["compare", str(base), str(new), "--threshold", "25"]).exit_code == 0
    same = runner.invoke(app, ["compare", str(base), str(base)])
    assert same.exit_code == 0 and "pass, no regression" in same.output


def test_noisy_runner_does_not_fail_the_build(tmp_path):
    base = write(run(spread=0.15), tmp_path / "base")
    new = write(run(scale=1.2, spread=0.15), tmp_path / "new")
    result = runner.invoke(app, ["compare", str(base), str(new)])
    assert result.exit_code == 0
    assert result.output.count("| noisy |") == 2


def test_newly_failing_variant_is_a_regression(tmp_path):
    new_rows = run()
    broken = new_rows[1]
    broken.status, broken.message, broken.median_ms = "failed", "rel error 0.31 > tolerance 0.016", math.nan
    base = write(run(), tmp_path / "base")
    new = write(new_rows, tmp_path / "new")
    result = runner.invoke(app, ["compare", str(base), str(new)])
    assert result.exit_code == 1
    assert "**now failed**: rel error 0.31 > tolerance 0.016" in result.output


def test_fail_on_missing_and_duplicates(tmp_path):
    base_rows = run()
    dup = run(scale=1.5)[1]
    dup.timestamp = "2026-11-21T10:00:00+00:00"  # a newer duplicate of vector_add/triton wins
    base = write(base_rows + [dup], tmp_path / "base")
    new = write(run(scale=1.5)[:2], tmp_path / "new")  # softmax not run: listed, not failed
    plain = runner.invoke(app, ["compare", str(base), str(new)])
    assert plain.exit_code == 0, plain.output  # vector_add/triton matches the newer 1.5x baseline row
    assert "had 1 duplicate row; the newest timestamp of each was kept" in plain.output
    assert runner.invoke(app, ["compare", str(base), str(new), "--fail-on-missing"]).exit_code == 1


def test_bad_files_are_one_line(tmp_path):
    junk = tmp_path / "junk.csv"
    junk.write_text("a,b\n1,2\n")
    result = runner.invoke(app, ["compare", str(junk), str(junk)])
    assert result.exit_code == 2
    assert "not a rooflint results file" in result.output
    good = write(run(), tmp_path / "good")
    assert runner.invoke(app, ["compare", str(good), str(good), "--threshold", "x"]).exit_code == 2


def test_console_entry_point_exits_1_on_the_planted_regression(tmp_path):
    # CliRunner runs click in standalone mode; the `rooflint` script goes through rooflint.cli.main,
    # which must hand compare's exit code to the shell for CI to go red.
    import subprocess
    import sys

    base = write(run(), tmp_path / "base")
    new = write(run(scale=1.2), tmp_path / "new")
    script = "import sys; from rooflint.cli import main; sys.argv = ['rooflint', 'compare'] + sys.argv[1:]; main()"
    done = subprocess.run([sys.executable, "-c", script, str(base), str(new)], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert "FAIL, 2 regressions past 5%" in done.stdout
    same = subprocess.run([sys.executable, "-c", script, str(base), str(base)], capture_output=True, text=True)
    assert same.returncode == 0, same.stderr


def test_throttled_rows_are_untrusted_not_slower(tmp_path):
    base = write(run(), tmp_path / "base")
    new_rows = run(scale=1.5)  # both triton rows 50% slower, but measured on a throttled GPU:
    new_rows[1].throttled, new_rows[1].sm_clock_mhz = True, 700.0  # bench's verdict (schema 2)
    new_rows[1].clock_event_reasons = "sw_power_cap;hw_slowdown"
    new_rows[3].sm_clock_mhz = 990.0  # today's schema: one clock, half the H100's 1980 MHz boost
    result = runner.invoke(app, ["compare", str(base), str(write(new_rows, tmp_path / "new"))])
    assert result.exit_code == 0, result.output  # untrusted is counted and shown, never failed
    assert "2 untrusted" in result.output and "pass, no regression" in result.output
    untrusted = [line for line in result.output.splitlines() if "untrusted: new: throttled" in line]
    assert len(untrusted) == 2 and all("+50.0%" in line for line in untrusted)
    assert any("hw_slowdown" in line for line in untrusted)
    assert any("50% of the 1980 MHz boost clock" in line for line in untrusted)
    # The same slowdown at healthy clocks is a regression.
    healthy = run(scale=1.5)
    for item in healthy:
        item.sm_clock_mhz = 1980.0
    failing = runner.invoke(app, ["compare", str(base), str(write(healthy, tmp_path / "healthy"))])
    assert failing.exit_code == 1 and "FAIL, 2 regressions" in failing.output


def test_rows_timed_beside_another_process_are_untrusted(tmp_path):
    # Measured on an H100 (reports/throttle): beside a matmul load, attention/cuda ran 2.6x slower
    # at 1800 MHz, a clock bench does not call throttled; only NVML's process list tells.
    base = write(run(), tmp_path / "base")
    new_rows = run(scale=2.6)
    for item in new_rows:
        item.sm_clock_mhz = 1800.0
    new_rows[1].message = "another process was using the GPU: pid 886 (1.1 GiB)"
    result = runner.invoke(app, ["compare", str(base), str(write(new_rows, tmp_path / "new"))])
    assert result.exit_code == 1  # the other slowed rows are still regressions
    shared = [line for line in result.output.splitlines() if "untrusted: new: shared GPU" in line]
    assert len(shared) == 1 and "pid 886" in shared[0]


def test_rows_match_per_gpu_type_not_device_or_host(tmp_path):
    # BASE from GPU 0 of one host, NEW from GPU 1 of another, written with an alias of the same GPU.
    base = [row("vector_add", "eager", 0.60, device_index=0, host="node-a")]
    new = [row("vector_add", "eager", 0.60, gpu="h100_sxm", device_index=1, host="node-b")]
    new[0].gpu = "H100"
    result = compare_frames(read_results(write(base, tmp_path / "a")), read_results(write(new, tmp_path / "b")))
    assert [(e.verdict, e.gpu) for e in result.entries] == [(SAME, "h100_sxm")]


def test_no_rows_in_common_is_bad_input(tmp_path):
    base = write(run()[:2], tmp_path / "base")  # vector_add only
    new = write(run()[2:], tmp_path / "new")  # softmax only: nothing to compare, nothing may pass
    with pytest.raises(UserError, match=r"share no \(family, variant, dtype, shape, gpu\) row"):
        compare_frames(read_results(base), read_results(new))
    result = runner.invoke(app, ["compare", str(base), str(new)])
    assert result.exit_code == 2 and "share no" in result.output


def test_rows_held_at_the_cap_by_their_own_load_are_compared_not_untrusted(tmp_path):
    """Bench keeps a compute-bound row held at the power cap by its own load unthrottled (its clock is
    reproducible there), so a real slowdown of it is caught: slower, exit 1."""
    note = "at its power cap by its own load: compute-bound work this long runs at the cap on a healthy GPU"
    base_rows, new_rows = run(), run(scale=1.5)
    for rows in (base_rows, new_rows):
        for capped in rows:
            capped.sm_clock_mhz, capped.sm_clock_min_mhz, capped.message = 1530.0, 1515.0, note
            capped.clock_event_reasons, capped.throttle_retries = "sw_power_cap", 1
    result = runner.invoke(
        app, ["compare", str(write(base_rows, tmp_path / "base")), str(write(new_rows, tmp_path / "new"))]
    )
    assert result.exit_code == 1, result.output
    assert "untrusted" not in result.output.split("\n\n")[1] and "slower" in result.output


@pytest.mark.parametrize(
    "threshold, note",
    [
        ("0.03", "note: --threshold 0.03 reads as 0.03%; for 3% write 3 or 3%"),
        ("0.5", "note: --threshold 0.5 reads as 0.5%; for 50% write 50 or 50%"),
        ("3", None),
        ("0.5%", None),  # a percent sign says what it means
    ],
)
def test_a_threshold_that_looks_like_a_share_is_read_back_to_the_user(tmp_path, threshold, note):
    """`--threshold 0.03` is three hundredths of a percent, which a user who meant 3% would never
    see from the table alone: a note on stderr says how it was read and how to write 3%."""
    base = write(run(), tmp_path / "base")
    new = write(run(), tmp_path / "new")
    result = CliRunner().invoke(app, ["compare", str(base), str(new), "--threshold", threshold])
    assert result.exit_code == 0, result.output
    if note is None:
        assert "note:" not in result.stderr
    else:
        assert note in result.stderr
