"""The commands that read results files (lint, report, compare, roofline), run as a user runs them:
the installed console script in a subprocess. Each case is a file or an --out that once slipped
through: a crash with exit 1, a broken row that passed, an input overwritten by the output.
"""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

from console_script import ROOFLINT, assert_refused, needs_console_script
from result_factory import row, run, write

from rooflint.outputs.results import CRASHED, FAILED

pytestmark = needs_console_script


def rooflint(*argv, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, ROOFLINT_CACHE=str(cwd / "cache"), COLUMNS="200")
    env.pop("ROOFLINT_DEBUG", None)
    return subprocess.run(
        [ROOFLINT, *map(str, argv)], capture_output=True, text=True, timeout=300, cwd=cwd, env=env, check=False
    )


def test_an_infinite_rate_or_count_is_refused_not_a_crash(tmp_path):
    # inf reached the text roofline's int(log10(...)) (report: OverflowError, exit 1) and int(n_samples)
    # (lint, compare: the same); it is a corrupted cell, refused like an infinite time.
    rate = run()
    rate[0].achieved_tflops = math.inf
    count = run()
    count[1].n_samples = math.inf
    rate, count, good = write(rate, tmp_path / "rate"), write(count, tmp_path / "count"), write(run(), tmp_path / "ok")
    assert_refused(rooflint("report", rate, cwd=tmp_path), "line 2", "achieved_tflops inf is not a finite number")
    assert_refused(rooflint("lint", count, cwd=tmp_path), "line 3", "n_samples inf is not a finite number")
    assert_refused(rooflint("compare", good, count, cwd=tmp_path), "n_samples inf")


def test_a_failed_rows_infinite_error_is_still_read(tmp_path):
    # The one inf rooflint writes: the error of an output holding NaN or Inf. Its row fails lint (1).
    rows = run()
    rows[1] = row("vector_add", "triton", status=FAILED, message="output has NaN", rel_error=math.inf)
    done = rooflint("lint", write(rows, tmp_path / "r"), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "correctness_failed" in done.stdout


def test_a_variant_new_in_new_that_crashed_fails_compare(tmp_path):
    base = write(run(), tmp_path / "base")
    new_rows = run() + [row("vector_add", "cuda", status=CRASHED, message="worker died (SIGSEGV)")]
    done = rooflint("compare", base, write(new_rows, tmp_path / "new"), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "**now crashed**: worker died" in done.stdout
    assert "only in `" not in done.stdout  # not filed away as a new row


def test_a_file_without_rows_is_refused_by_lint_and_compare(tmp_path):
    empty = write([], tmp_path / "empty")  # a run killed before its first row: the header alone
    assert_refused(rooflint("lint", empty, cwd=tmp_path), "no result rows in", "empty/results.csv")
    done = rooflint("compare", write(run(), tmp_path / "base"), empty, cwd=tmp_path)
    assert_refused(done, "empty/results.csv has no result rows")


def test_report_and_compare_never_write_over_a_file_they_read(tmp_path):
    results = write(run(), tmp_path / "out")
    before = results.read_bytes(), results.with_suffix(".json").read_bytes()
    base = write(run(), tmp_path / "base")
    for argv in (
        ["report", results, "--out", results],
        ["report", "out/results.json", "--format", "html", "--out", "out/../out/results.json"],
        ["compare", base, results, "--out", results],
    ):
        assert_refused(rooflint(*argv, cwd=tmp_path), "is also an input", "give another path")
    assert (results.read_bytes(), results.with_suffix(".json").read_bytes()) == before


def test_report_is_not_written_over_the_rooflines_beside_it(tmp_path):
    results = write(run(), tmp_path / "out")
    for name in ("roofline.png", "roofline-h100_sxm.svg"):
        done = rooflint("report", results, "--out", tmp_path / "report" / name, cwd=tmp_path)
        assert_refused(done, "draws its rooflines beside it", "give the report another name")


def test_roofline_names_the_rows_it_could_not_draw(tmp_path):
    rows = run()
    rows[1] = row("vector_add", "triton", status=CRASHED, message="worker died")
    rows[2].variant = "变体"  # a name the font lacks: boxes in the image, no warning on the console
    done = rooflint("roofline", write(rows, tmp_path / "r"), "--out", tmp_path / "plot", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr  # drawn, and the crash is a failure
    assert (tmp_path / "plot" / "roofline.png").exists()
    assert "not drawn: 1 row that did not pass: vector_add/triton bf16" in done.stderr
    assert "crashed" in done.stderr
    assert "Warning" not in done.stderr and "Traceback" not in done.stderr


def test_a_negative_cost_rate_or_ceiling_is_refused_but_a_signed_column_is_read(tmp_path):
    # A negative byte count or bandwidth would draw a point left of the roofline or a roof below
    # the floor; only a call-minus-graph time and the CPU's device index -1 are signed.
    for name, value in (("ideal_bytes", -100.0), ("bandwidth_gbps", -3.0), ("n_samples", -3)):
        rows = run()
        setattr(rows[0], name, value)
        done = rooflint("lint", write(rows, tmp_path / name), cwd=tmp_path)
        assert_refused(done, "line 2", f"{name} ", "is negative; valid: a number of 0 or more")
    rows = run()
    rows[0].launch_overhead_ms, rows[0].device_index = -0.001, -1
    done = rooflint("lint", write(rows, tmp_path / "signed"), cwd=tmp_path)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stdout + done.stderr


def test_an_ok_row_whose_p20_is_above_its_p80_is_refused(tmp_path):
    # compare's interval test would read a reversed spread as no spread and fall back to the threshold.
    rows = run()
    rows[0].p20_ms, rows[0].p80_ms = rows[0].median_ms * 1.2, rows[0].median_ms * 0.8
    done = rooflint("compare", write(run(), tmp_path / "base"), write(rows, tmp_path / "new"), cwd=tmp_path)
    assert_refused(done, "line 2", "is above p80_ms")
