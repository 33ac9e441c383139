"""The result readers and presenters (`rooflint report`, `roofline`, `lint` of a plain CSV), run as a
user runs them (the installed console script in a subprocess). Each case is a bug found that way:

- a report over a run and a later re-run of one of its families printed, for the whole GPU section,
  the first row's torch version, commit and timestamp: the re-run's rows read as measured with them;
- `rooflint roofline` drew every row of its file, where report, compare and merge keep the newest of
  each key: a point twice, or an ok row a newer crash replaced (drawn, beside "not drawn: crashed");
- a report over a run with a crashed row and skipped ones summed them as "not ok" and said no more
  above its tables: its Markdown (a CI job summary) read as a run with skips, over exit 1;
- a plain lint CSV's p20_ms above its p80_ms, or a time outside [p20_ms, p80_ms], linted clean (a
  results file with either is refused);
- a plain lint CSV with time_ms and time_us that disagree (one in the wrong unit) was judged on
  time_ms, time_us unread and nothing said.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from console_script import assert_refused, needs_console_script, run_in
from result_factory import read_csv, row, run, write


@needs_console_script
def test_a_report_over_two_runs_names_both_commits_and_the_span_of_their_times(tmp_path: Path) -> None:
    """Before: `NVIDIA H100 SXM5 80GB · torch 2.11.0 · commit 0123456789 · 2026-11-20T10:00:00+00:00`, the
    softmax rows' torch 2.12.0, commit fedcba9876 and date unsaid."""
    write(run(), tmp_path / "first")
    rerun = [
        dataclasses.replace(
            r, torch_version="2.12.0", git_commit="fedcba9876543210", timestamp="2026-11-25T09:00:00+00:00"
        )
        for r in run()
        if r.family == "softmax"
    ]
    write(rerun, tmp_path / "rerun")
    done = run_in(tmp_path, "report", "first/results.csv", "rerun/results.csv", "--format", "md", "--out", "r.md")
    assert done.returncode == 0, done.stdout + done.stderr
    environment = [line for line in (tmp_path / "r.md").read_text().splitlines() if " · commit " in line]
    assert len(environment) == 1, environment
    line = environment[0]
    assert "torch 2.11.0, 2.12.0" in line and "commit 0123456789, fedcba9876" in line, line
    assert line.endswith("2026-11-20T10:00:00+00:00 to 2026-11-25T09:00:00+00:00"), line


@needs_console_script
def test_roofline_keeps_the_newest_row_of_a_key_as_report_does(tmp_path: Path) -> None:
    """Before: the file's ok vector_add/eager row drawn, a newer crash of it named as not drawn, exit
    1; and vector_add/triton, written twice, drawn twice. Report reads the same file as one crash."""
    rows = run()
    crashed = row("vector_add", "eager", status="crashed", message="worker died", timestamp="2026-11-21T10:00:00+00:00")
    write([*rows, crashed, rows[1]], tmp_path / "out")
    done = run_in(tmp_path, "roofline", "out/results.csv", "--out", "plot")
    assert done.returncode == 1, done.stdout + done.stderr
    labels = [
        point["label"] for point in read_csv(tmp_path / "plot" / "roofline.csv") if point["point_kind"] == "measured"
    ]
    assert sorted(labels) == ["softmax/eager bf16", "softmax/triton bf16", "vector_add/triton bf16"], labels
    assert "note: 2 duplicate rows dropped" in done.stderr, done.stderr
    assert "not drawn: 1 row that did not pass: vector_add/eager" in done.stderr, done.stderr

    report = run_in(tmp_path, "report", "out/results.csv", "--format", "json", "--out", "r.json")
    assert report.returncode == 1 and "vector_add/eager" in report.stderr, report.stderr


@needs_console_script
def test_a_report_says_how_many_rows_did_not_pass_apart_from_the_skips(tmp_path: Path) -> None:
    """Before: `5 rows (3 ok, 2 not ok) from ...`, the crash one of the two, said only in its table."""
    rows = run()[:3]
    skipped = row("softmax", "triton", status="skipped", message="needs a CUDA GPU", shape="M=4096,N=8192")
    crashed = row("softmax", "cuda", status="crashed", message="worker died", shape="M=4096,N=8192")
    write([*rows, skipped, crashed], tmp_path / "out")
    done = run_in(tmp_path, "report", "out/results.csv", "--format", "md")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "5 rows (3 ok, 2 not ok) from `out/results.csv`. 1 row did not pass (1 crashed)." in done.stdout
    done = run_in(tmp_path, "report", "out/results.csv", "--format", "json", "--out", "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["did_not_pass"] == {"crashed": 1}


PLAIN = "kernel,gpu,time_ms,flops,bytes,precision,compute_unit"


@needs_console_script
def test_a_plain_csv_spread_that_is_not_one_is_refused(tmp_path: Path) -> None:
    """Before: `clean: 1 rows: 0 errors, 0 warnings, 0 info`, exit 0, for each file."""
    (tmp_path / "upside_down.csv").write_text(f"{PLAIN},p20_ms,p80_ms\nk,h100,1.8,1.1e12,4e8,bf16,tensor,2.5,1.0\n")
    assert_refused(run_in(tmp_path, "lint", "upside_down.csv"), "line 2", "p20_ms 2.5 is above p80_ms 1")
    (tmp_path / "outside.csv").write_text(f"{PLAIN},p20_ms,p80_ms\nk,h100,1.8,1.1e12,4e8,bf16,tensor,0.1,0.2\n")
    assert_refused(run_in(tmp_path, "lint", "outside.csv"), "line 2", "1.8 ms is outside [p20_ms 0.1, p80_ms 0.2]")
    (tmp_path / "fine.csv").write_text(f"{PLAIN},p20_ms,p80_ms\nk,h100,1.8,1.1e12,4e8,bf16,tensor,1.78,1.82\n")
    done = run_in(tmp_path, "lint", "fine.csv")
    assert done.returncode == 0 and "clean" in done.stdout, done.stdout + done.stderr


@needs_console_script
def test_a_plain_csv_whose_ms_and_us_times_disagree_is_refused(tmp_path: Path) -> None:
    """Before: clean, exit 0: judged on time_ms 1.8, the 1800 ms of time_us unread."""
    header = "kernel,gpu,time_ms,time_us,flops,bytes,precision,compute_unit"
    (tmp_path / "both.csv").write_text(f"{header}\nk,h100,1.8,1800000,1.1e12,4e8,bf16,tensor\n")
    assert_refused(run_in(tmp_path, "lint", "both.csv"), "line 2", "time_ms 1.8 and time_us 1.8e+06 disagree")
    (tmp_path / "agree.csv").write_text(f"{header}\nk,h100,1.8,1803,1.1e12,4e8,bf16,tensor\n")
    done = run_in(tmp_path, "lint", "agree.csv")
    assert done.returncode == 0 and "clean" in done.stdout, done.stdout + done.stderr
