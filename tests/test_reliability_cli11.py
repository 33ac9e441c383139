"""The commands that read results files, run as a user runs them: the installed console script in a
subprocess, on files a crashed run, a hand edit or a copy could leave. Each case is a bug found that
way.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from console_script import assert_refused, needs_console_script, run_in
from result_factory import row, run, write

pytestmark = needs_console_script


def rooflint(*argv, tmp_path: Path) -> subprocess.CompletedProcess:
    return run_in(tmp_path, *argv, timeout=120)


def test_compare_fails_a_row_that_crashed_in_both_runs(tmp_path):
    # A file compared with itself, or a baseline that had crashed too, passed (exit 0) with the
    # crash listed as "still crashed": the CI gate went green on a crashed row.
    rows = run()
    rows[1] = row("vector_add", "triton", status="crashed", message="process died (exit -9)")
    results = write(rows, tmp_path / "run")
    done = rooflint("compare", results, results, tmp_path=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "## rooflint compare: FAIL, 1 row still failing" in done.stdout
    assert "**still crashed**" in done.stdout and "Traceback" not in done.stderr
    # A baseline's failure that NEW only skipped is still no failure of NEW.
    skipped = run()
    skipped[1] = row("vector_add", "triton", status="skipped", message="needs a CUDA GPU")
    done = rooflint("compare", results, write(skipped, tmp_path / "skipped"), tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_folder_where_a_roofline_file_goes_is_refused_in_one_line(tmp_path):
    # roofline.png (or .csv) already a folder in --out: exit 1 with "IsADirectoryError: [Errno 21]",
    # after the files before it had been replaced; the report's rooflines beside --out alike.
    results = write(run(), tmp_path / "run")
    for name in ("roofline.png", "roofline.csv"):
        out = tmp_path / f"out-{name}"
        (out / name).mkdir(parents=True)
        done = rooflint("roofline", results, "--out", out, tmp_path=tmp_path)
        assert_refused(done, f"cannot write roofline {out / name}: it is a directory")
        assert sorted(p.name for p in out.iterdir()) == [name]  # nothing drawn beside it
    report = tmp_path / "report" / "index.html"
    (report.parent / "roofline.png").mkdir(parents=True)
    done = rooflint("report", results, "--format", "html", "--out", report, tmp_path=tmp_path)
    assert_refused(done, "roofline.png: it is a directory")
    assert not report.exists()
    # Written whole through a private name: nothing is left beside the files.
    done = rooflint("roofline", results, "--out", tmp_path / "fine", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in (tmp_path / "fine").iterdir()) == ["roofline.csv", "roofline.png", "roofline.svg"]


def test_merge_refuses_files_without_rows_and_keeps_its_out(tmp_path):
    # Runs killed before their first row (a header alone) merged to "merged 0 rows", exit 0, over
    # the merged file there was: a file lint, report and compare all refuse as holding no rows.
    empty = write([], tmp_path / "empty")
    merged = write(run(), tmp_path / "merged")
    before = merged.read_bytes()
    done = rooflint("merge", empty, empty.with_suffix(".json"), "--out", merged, tmp_path=tmp_path)
    assert_refused(done, "no result rows in", "empty/results.csv", "merge results files that hold rows")
    assert merged.read_bytes() == before
    # One file without rows beside one with them is a merge like any other.
    done = rooflint("merge", empty, merged, "--out", tmp_path / "m.csv", tmp_path=tmp_path)
    assert done.returncode == 0 and "merged 4 rows from 2 files" in done.stderr, done.stderr


def test_a_row_without_a_family_variant_or_dtype_is_refused(tmp_path):
    # A cell blanked by a hand edit or a cut: the report drew an untitled section ("### ") or a
    # nameless variant row, and compare and merge joined rows on the empty name, exit 0.
    cases = {"family": row(family=""), "variant": row(variant=" "), "dtype": row(dtype="")}
    for name, blank in cases.items():
        results = write([blank, *run()[1:]], tmp_path / name)
        assert_refused(rooflint("report", results, tmp_path=tmp_path), f"line 2: {name} is empty", "valid:")
    results = tmp_path / "family" / "results.csv"
    for argv in (
        ("lint", results),
        ("roofline", results, "--out", tmp_path / "r"),
        ("merge", results, "--out", tmp_path / "m.csv"),
        ("compare", write(run(), tmp_path / "base"), results),
        ("report", results.with_suffix(".json")),
    ):
        where = "row 1" if str(argv[-1]).endswith(".json") else "line 2"
        assert_refused(rooflint(*argv, tmp_path=tmp_path), f"{where}: family is empty", "valid:")
    assert not (tmp_path / "m.csv").exists()


def test_a_rate_past_any_gpu_is_refused_not_drawn(tmp_path):
    # achieved_tflops 1e308 (a corrupted cell; only times had a bound): the HTML report crashed with
    # "OverflowError: cannot convert float infinity to integer", exit 1, and roofline drew it.
    results = write([row(achieved_tflops=1e308), *run()[1:]], tmp_path / "run")
    report = ("report", results, "--format", "html", "--out", tmp_path / "report" / "index.html")
    roofline = ("roofline", results, "--out", tmp_path / "r")
    for argv in (report, roofline):
        done = rooflint(*argv, tmp_path=tmp_path)
        assert_refused(done, "line 2: achieved_tflops 1e+308 is past any count or rate", "valid: a number under")
    # A failed row's error may be as large as its wrong output makes it.
    failed = row("vector_add", "cuda", status="failed", message="mismatch", rel_error=3e38, tolerance=0.01)
    done = rooflint("report", write([*run(), failed], tmp_path / "failed"), tmp_path=tmp_path)
    assert done.returncode == 1 and "1 row did not pass (1 failed)" in done.stderr, done.stderr


def test_counters_cut_short_are_refused_not_read_as_a_smaller_count(tmp_path):
    # An ncu.csv copied or written cut short: pandas read its last row's cut count (40 of 4098000
    # bytes) as measured, and lint's bytes_disagree and the report's ncu points judged it.
    results = write(run(), tmp_path / "r")
    counters = tmp_path / "ncu.csv"
    header = "family,variant,dtype,shape,measured_dram_bytes,notes\r\n"
    whole = f"{header}vector_add,eager,bf16,n=268435456,1610612736,\r\nvector_add,triton,bf16,n=268435456,4098000,x\r\n"
    counters.write_text(whole[: whole.index("4098000") + 2], newline="")
    for argv in (
        ("lint", results, "--counters", counters),
        ("report", results, "--counters", counters, "--format", "html", "--out", tmp_path / "o" / "i.html"),
    ):
        assert_refused(rooflint(*argv, tmp_path=tmp_path), "ncu.csv line 3: truncated", "cut short")
    counters.write_text(whole, newline="")  # the same file whole is read
    done = rooflint("lint", results, "--counters", counters, tmp_path=tmp_path)
    assert done.returncode in (0, 1) and "error:" not in done.stderr, done.stdout + done.stderr
    assert "bytes_disagree" in done.stdout  # the triton row judged on its whole count
