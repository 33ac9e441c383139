"""The commands run as a new user runs them: the installed console script in a subprocess, on options
typed a little wrong, files edited by hand and --out folders holding what a run never left there.
Each case is a bug found that way.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from console_script import assert_refused, needs_console_script, run_in
from result_factory import read_csv, row, run, write

pytestmark = needs_console_script


def rooflint(*argv, tmp_path: Path) -> subprocess.CompletedProcess:
    return run_in(tmp_path, *argv, timeout=120)


def test_merge_writes_a_crashed_row_and_fails_on_it(tmp_path):
    # A crash is a failure in every command that reads it: merge wrote it with exit 0, so a
    # `rooflint merge ... && publish` step passed the rows that report, lint and compare all fail.
    rows = run()
    rows[1] = row("vector_add", "triton", status="crashed", message="process died (exit -9)")
    crashed = write(rows, tmp_path / "crashed")
    good = write(run("a100_80gb_sxm"), tmp_path / "good")
    out = tmp_path / "merged.csv"
    done = rooflint("merge", good, crashed, "--out", out, tmp_path=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "failing: 1 row did not pass (1 crashed): vector_add/triton" in done.stderr
    # Nothing lost: the merged file is written whole, the crash in it.
    statuses = sorted(item["status"] for item in read_csv(out))
    assert statuses == ["crashed"] + ["ok"] * 7
    # A merge of rows that all passed (a skip is no failure) still exits 0.
    rows[1] = row("vector_add", "triton", status="skipped", message="needs a CUDA GPU")
    skipped = write(rows, tmp_path / "skipped")
    done = rooflint("merge", good, skipped, "--out", out, tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_ok_row_past_its_tolerance_is_refused_by_every_reader(tmp_path):
    # bench keeps a row ok only where its error is within its tolerance. A hand-edited ok row with
    # rel_error 0.5 against 0.016 failed lint (correctness_failed) but passed compare as "same",
    # and report, merge and roofline drew and kept it.
    base = write(run(), tmp_path / "base")
    rows = run()
    rows[1].rel_error, rows[1].tolerance = 0.5, 0.016
    new = write(rows, tmp_path / "new")
    why = ("line 3", "rel_error 0.5 is above tolerance 0.016 on a row of status ok", "status failed")
    assert_refused(rooflint("compare", base, new, tmp_path=tmp_path), *why)
    assert_refused(rooflint("report", new, tmp_path=tmp_path), *why)
    assert_refused(rooflint("merge", new, "--out", tmp_path / "m.csv", tmp_path=tmp_path), *why)
    assert_refused(rooflint("lint", new, tmp_path=tmp_path), *why)
    # Within its tolerance, and a failed row past it, are read as ever.
    rows[1].rel_error = 0.016
    rows[3] = row("softmax", "triton", status="failed", message="mismatch", rel_error=0.5, tolerance=0.016)
    done = rooflint("compare", base, write(rows, tmp_path / "within"), tmp_path=tmp_path)
    assert done.returncode == 1 and "**now failed**" in done.stdout, done.stdout + done.stderr


def test_a_timing_mode_rooflint_never_writes_is_refused(tmp_path):
    # compare lists rows timed two ways as "other timing", never compared: a row three times slower
    # with its timing_mode misspelt ("cuda_event") passed the gate, exit 0.
    base = write(run(), tmp_path / "base")
    rows = run()
    rows[1] = row("vector_add", "triton", 0.55 * 3, timing_mode="cuda_event")  # base: 0.55 ms
    new = write(rows, tmp_path / "new")
    why = ("line 3", "timing_mode 'cuda_event' is not one rooflint writes", "valid: cuda_events, cuda_graph")
    assert_refused(rooflint("compare", base, new, tmp_path=tmp_path), *why)
    assert_refused(rooflint("merge", new, "--out", tmp_path / "m.csv", tmp_path=tmp_path), *why)
    assert_refused(rooflint("report", new, tmp_path=tmp_path), *why)
    # The modes rooflint writes are read: a graph-timed row is still "other timing", and a model's
    # profiler rows are kept.
    rows[1].timing_mode = "cuda_graph"
    rows[3].timing_mode = "profiler_graph_replay_kernels"
    done = rooflint("merge", write(rows, tmp_path / "known"), "--out", tmp_path / "m.csv", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (("report", "{results}", "--out", "report/"), "--out"),
        (("compare", "{results}", "{results}", "--out", "diff/"), "--out"),
        (("merge", "{results}", "--out", "merged/"), "--out"),
        (("bench", "vector_add", "--device", "cpu", "--out", "run", "--junit", "junit/"), "--junit"),
        (("ab", "vector_add", "-V", "eager,compile", "--device", "cpu", "--csv", "ab/"), "--csv"),
        (("doctor", "--json", "doctor/"), "--json"),
    ],
)
def test_a_file_option_ending_in_a_slash_is_refused(tmp_path, argv, option):
    # `--out report/` names a folder, but the trailing slash was dropped: the report was written as a
    # file named `report` and its rooflines drawn into the folder above, exit 0.
    results = write(run(), tmp_path / "results")
    argv = [str(results) if part == "{results}" else part for part in argv]
    value = argv[argv.index(option) + 1]
    assert_refused(rooflint(*argv, tmp_path=tmp_path), f"{option} {value} ends in /", "names a folder")
    assert not (tmp_path / value.rstrip("/")).exists()
    assert not (tmp_path / "roofline.png").exists()


def test_a_folder_in_place_of_a_run_file_is_refused_before_measuring(tmp_path):
    # A folder named worker.log or results.prev.csv in --out stopped bench with "error:
    # IsADirectoryError: [Errno 21]" and exit 1, after the run had begun (its results.csv emptied).
    out = tmp_path / "out"
    (out / "worker.log").mkdir(parents=True)
    done = rooflint("bench", "vector_add", "-V", "eager", "--device", "cpu", "--out", out, tmp_path=tmp_path)
    assert_refused(done, f"{out / 'worker.log'} is a folder where the run writes its worker.log")
    assert sorted(path.name for path in out.iterdir()) == ["worker.log"]
    # The last run's results stay as they were, not half moved aside.
    (out / "worker.log").rmdir()
    (out / "results.prev.csv").mkdir()
    results = write(run(), out)
    before = results.read_bytes()
    done = rooflint("bench", "vector_add", "-V", "eager", "--device", "cpu", "--out", out, tmp_path=tmp_path)
    assert_refused(done, "results.prev.csv is a folder where the run writes its results.prev.csv")
    assert results.read_bytes() == before
