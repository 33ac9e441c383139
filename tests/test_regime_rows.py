"""A number is only meaningful with the regime it was timed in (docs/timing.md): a burst run and a
sustained run of the same rows are two measurements. merge keeps both, compare pairs rows of one
regime and refuses two runs with none in common, and a report judges a row only against baselines
of its own regime. Through the installed console script, as a user runs them."""

from __future__ import annotations

import subprocess

from console_script import ROOFLINT, assert_refused, needs_console_script
from result_factory import row, run, write

from rooflint.outputs.merge import merge_files
from rooflint.outputs.report import _vs_best_compile
from rooflint.outputs.results import read_results

pytestmark = needs_console_script


def rooflint(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([ROOFLINT, *args], capture_output=True, text=True, timeout=300, check=False)


def timed(regime: str, scale: float = 1.0, when: str = "2026-11-20T10:00:00+00:00"):
    rows = run(scale=scale)
    for item in rows:
        item.regime, item.timestamp = regime, when
    return rows


def test_merge_keeps_a_burst_and_a_sustained_run_of_the_same_rows(tmp_path):
    burst = write(timed("burst"), tmp_path / "burst")
    sustained = write(timed("sustained", scale=1.3, when="2026-11-21T10:00:00+00:00"), tmp_path / "sustained")
    out = tmp_path / "merged.csv"
    done = rooflint("merge", str(burst), str(sustained), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "duplicate" not in done.stderr  # nothing was dropped: the old merge kept only the newer run
    frame = read_results(out)
    assert len(frame) == 8 and sorted(set(frame["regime"])) == ["burst", "sustained"]


def test_a_newer_row_replaces_only_its_own_regime_and_an_untimed_one_replaces_all(tmp_path):
    old = write(timed("burst") + timed("sustained"), tmp_path / "old")
    rerun = write(timed("burst", scale=2.0, when="2026-11-22T10:00:00+00:00"), tmp_path / "rerun")
    frame = merge_files([old, rerun]).frame
    triton = frame[(frame["family"] == "vector_add") & (frame["variant"] == "triton")]
    assert sorted(zip(triton["regime"], triton["median_ms"])) == [("burst", 1.1), ("sustained", 0.55)]
    crashed = row("vector_add", "triton", status="crashed", message="boom", timestamp="2026-11-23T10:00:00+00:00")
    frame = merge_files([old, rerun, write([crashed], tmp_path / "crash")]).frame
    triton = frame[(frame["family"] == "vector_add") & (frame["variant"] == "triton")]
    assert list(triton["status"]) == ["crashed"]  # the newest state of the row, whatever its regime


def test_compare_refuses_runs_timed_in_different_regimes(tmp_path):
    burst = write(timed("burst"), tmp_path / "burst")
    sustained = write(timed("sustained", scale=1.3), tmp_path / "sustained")
    done = rooflint("compare", str(burst), str(sustained))
    assert_refused(done, "burst", "sustained", "--regime")


def test_compare_pairs_each_regime_with_its_own(tmp_path):
    base = write(timed("burst") + timed("sustained", scale=1.3), tmp_path / "base")
    # NEW: the burst rows unchanged, the sustained ones 30% slower than BASE's sustained rows.
    new = write(timed("burst") + timed("sustained", scale=1.69), tmp_path / "new")
    done = rooflint("compare", str(base), str(new), "--threshold", "5%")
    assert done.returncode == 1, done.stdout + done.stderr  # the sustained triton rows regressed
    assert "FAIL, 2 regressions" in done.stdout
    assert "6 same" in done.stdout  # eager in both regimes and triton in burst, paired with their own

    only_burst = write(timed("burst"), tmp_path / "only_burst")
    done = rooflint("compare", str(base), str(only_burst))
    # NEW timed no sustained rows: BASE's are its own, not rows NEW lost.
    assert done.returncode == 0, done.stdout + done.stderr
    assert "now missing" not in done.stdout and "4 only in base" in done.stdout


def test_compare_still_fails_a_row_that_crashed_after_being_timed(tmp_path):
    base = write(timed("burst"), tmp_path / "base")
    rows = timed("burst")
    rows[1] = row("vector_add", "triton", status="crashed", message="illegal memory access")
    new = write(rows, tmp_path / "new")
    done = rooflint("compare", str(base), str(new))
    assert done.returncode == 1 and "now crashed" in done.stdout, done.stdout + done.stderr


def test_a_report_judges_a_row_against_baselines_of_its_own_regime(tmp_path):
    def pair(regime, own_ms, compiled_ms):
        return [
            row("softmax", "triton", own_ms, regime=regime),
            row("softmax", "compile", compiled_ms, kind="compile", regime=regime),
        ]

    frame = read_results(write(pair("burst", 1.0, 2.0) + pair("sustained", 1.5, 1.2), tmp_path / "both"))
    ratios = dict(zip(zip(frame["variant"], frame["regime"]), _vs_best_compile(frame)))
    # Across regimes the burst row would have read 1.2 / 1.0 against the sustained compile row.
    assert ratios[("triton", "burst")] == 2.0
    assert ratios[("triton", "sustained")] == 1.2 / 1.5
