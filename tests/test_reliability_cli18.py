"""The commands that read results files (lint, compare, merge, report, roofline), run as a user runs
them: the installed console script in a subprocess, on files a hand edit, a pipe or another tool
could give them. Each case is a bug found that way: a name or path holding rich markup crashing lint
and merge with a traceback (and printed without its brackets by report and roofline), compare's
Markdown rendering a file's name, GPU or library version as code or HTML of its own, lint reading a
pipe twice and calling it empty, a plain table's capitalised header refused though docs/lint.md reads
it in any case, and cells that read as another number or row than the one written: a median outside
its own [p20, p80], a schema_version from a newer rooflint, a JSON list or object as a name,
"1_000" read as 1000, a column named "Family" or "P20_ms".
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from console_script import ROOFLINT, assert_refused, needs_console_script, run_in
from result_factory import rewritten, row, run, write

pytestmark = needs_console_script

READERS = ("lint", "compare", "merge", "report", "roofline")


def rooflint(*argv, tmp_path: Path) -> subprocess.CompletedProcess:
    return run_in(tmp_path, *argv, timeout=120)


def read_by_every_reader(results: Path, tmp_path: Path) -> dict[str, subprocess.CompletedProcess]:
    """Each command that reads results, run on ``results``."""
    argv = {
        "lint": ("lint", results),
        "compare": ("compare", results, results),
        "merge": ("merge", results, "--out", tmp_path / "merged.csv"),
        "report": ("report", results),
        "roofline": ("roofline", results, "--out", tmp_path / "plots"),
    }
    return {name: rooflint(*argv[name], tmp_path=tmp_path) for name in READERS}


def test_names_and_paths_holding_rich_markup_are_printed_as_written(tmp_path):
    """A crashed row's message "[/]boom" crashed `lint` with rich's MarkupError (a traceback, exit 1)
    while printing its table, a GPU named "my[/]gpu" crashed `merge` while printing its summary, and
    `report --out "[b]r.md"` and `roofline --out "[b]plots"` said "wrote r.md": the brackets read as
    a style and dropped from the path they had written."""
    rows = run()
    rows[1] = row("vector_add", "triton", status="crashed", message="[/]boom")
    rows[2].gpu = "my[/]gpu"
    results = write(rows, tmp_path / "run")
    done = rooflint("lint", results, tmp_path=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert "crashed: [/]boom" in done.stdout
    done = rooflint("merge", results, "--out", "m.csv", tmp_path=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr  # 1: the crash
    assert "(GPUs: h100_sxm, my[/]gpu) -> m.csv" in done.stderr
    done = rooflint("report", results, "--out", "[b]r.md", tmp_path=tmp_path)
    assert "wrote [b]r.md" in done.stderr and (tmp_path / "[b]r.md").exists(), done.stderr
    done = rooflint("roofline", write(run(), tmp_path / "clean"), "--out", "[b]plots", tmp_path=tmp_path)
    assert done.returncode == 0 and "wrote [b]plots/roofline.png" in done.stdout, done.stdout + done.stderr


def test_compare_markdown_shows_file_names_and_notes_as_written(tmp_path):
    """The diff put each file's name in one-backtick code spans (a name with a backtick ended the
    span early and left the rest as raw Markdown) and the notes raw: a library version
    "<b>2</b>" rendered bold in a PR comment, a variant "*x*" as emphasis."""

    def peers(version: str) -> list:
        return [
            row("attention", "eager", 2.0),
            row("attention", "*x*", 1.0, kind="library", library="flash-attn", library_version=version),
        ]

    base = write(peers("<b>2</b>"), tmp_path / "we`ird")
    named = base.with_name("base`.csv")
    base.rename(named)
    new = write(peers("3"), tmp_path / "new")
    done = rooflint("compare", named, new, "--out", "diff.md", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"`` {named} `` -> `{new}`" in done.stdout
    assert "> attention / \\*x\\* / bf16 / n=268435456: flash-attn &lt;b>2&lt;/b> -> 3: another release" in done.stdout
    assert (tmp_path / "diff.md").read_text() == done.stdout


def _through_a_pipe(tmp_path: Path, text: str, *argv) -> subprocess.CompletedProcess:
    env = dict(os.environ, ROOFLINT_CACHE=str(tmp_path / "cache"), COLUMNS="200")
    return subprocess.run(
        [ROOFLINT, *map(str, argv)], input=text, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )


def test_lint_reads_results_and_counters_from_a_pipe(tmp_path):
    """`rooflint lint /dev/stdin` (or `<(git show main:out/results.csv)`) read the pipe once to tell a
    plain table from a results file and again to read it: "/dev/stdin is not a rooflint results file:
    it is empty". `--counters` from a pipe alike, though report, compare and merge read pipes."""
    results = write(run(), tmp_path / "run")
    done = _through_a_pipe(tmp_path, results.read_text(), "lint", "/dev/stdin")
    assert done.returncode == 0 and "clean: 4 rows" in done.stdout, done.stdout + done.stderr
    plain = "kernel,gpu,time_ms,bytes\nfoo,h100_sxm,1.0,1000000000\n"
    done = _through_a_pipe(tmp_path, plain, "lint", "/dev/stdin")
    assert done.returncode == 0 and "clean: 1 rows" in done.stdout, done.stdout + done.stderr
    counters = "family,variant,dtype,shape,measured_dram_bytes\nvector_add,eager,bf16,n=268435456,1e9\n"
    done = _through_a_pipe(tmp_path, counters, "lint", results, "--counters", "/dev/stdin")
    assert done.returncode == 0 and "bytes_disagree" in done.stdout, done.stdout + done.stderr


def test_a_plain_table_header_is_read_in_any_case(tmp_path):
    """docs/lint.md reads a plain table's columns "in any case", but a header "Kernel,GPU,..." was
    refused as "not a rooflint results file: missing columns family, variant, ...": only a lower-case
    `kernel` told lint the file was a plain table."""
    (tmp_path / "published.csv").write_text("Kernel,GPU,Time_ms,Bytes\nfoo,h100_sxm,1.0,1000000000\n")
    done = rooflint("lint", "published.csv", tmp_path=tmp_path)
    assert done.returncode == 0 and "clean: 1 rows" in done.stdout, done.stdout + done.stderr


def test_a_median_outside_its_own_spread_is_refused_by_every_reader(tmp_path):
    """An ok row whose median_ms was edited to 5 ms beside p20/p80 of 0.59/0.61 was read by every
    command: compare judged the change by that median and its noise by an interval it was not in."""
    results = write(run(), tmp_path / "run")
    bad = rewritten(results, tmp_path / "bad.csv", lambda rows: rows[0].update(median_ms="5"))
    for done in read_by_every_reader(bad, tmp_path).values():
        assert_refused(done, "bad.csv line 2: median_ms 5 is outside [p20_ms 0.594, p80_ms 0.606]")
    # One bound recorded (an old file's p20 alone) still bounds; none recorded is no spread, as before.
    one = rewritten(results, tmp_path / "one.csv", lambda rows: rows[0].update(p80_ms="", median_ms="0.5"))
    assert_refused(rooflint("lint", one, tmp_path=tmp_path), "median_ms 0.5 is outside [p20_ms 0.594, p80_ms nan]")
    # (Its rates emptied with it: a rate its row's bytes and time do not give is refused of its own.)
    edit = dict(p20_ms="", p80_ms="", median_ms="5", achieved_gbps="", achieved_tflops="")
    none = rewritten(results, tmp_path / "none.csv", lambda rows: rows[0].update(edit))
    assert rooflint("lint", none, tmp_path=tmp_path).returncode == 0


def test_a_results_json_from_a_newer_schema_is_refused(tmp_path):
    """schema_version was never read: a results.json a newer rooflint wrote (99), or one with
    "schema_version": "two", was read as this schema's rows. One without it (made by hand) is read."""
    payload = json.loads(write(run(), tmp_path / "run").with_name("results.json").read_text())
    cases = {
        99: "schema_version 99: newer than this rooflint reads (1 to 2); upgrade",
        "two": "schema_version 'two': not a schema version; valid: a whole number",
    }
    for version, expected in cases.items():
        path = tmp_path / f"v{version}.json"
        path.write_text(json.dumps(dict(payload, schema_version=version)))
        for done in read_by_every_reader(path, tmp_path).values():
            assert_refused(done, f"{path.name} has {expected}")
    payload.pop("schema_version")
    (tmp_path / "none.json").write_text(json.dumps(payload))
    assert rooflint("lint", "none.json", tmp_path=tmp_path).returncode == 0


@pytest.mark.parametrize("value,kind", [(["vector_add"], "list"), ({"n": 1}, "object")])
def test_a_json_list_or_object_as_a_name_is_refused(tmp_path, value, kind):
    """A results.json row with "family": ["vector_add"] was read as the family "['vector_add']" (its
    Python text): listed, joined and compared as a name no run ever wrote."""
    payload = json.loads(write(run(), tmp_path / "run").with_name("results.json").read_text())
    payload["rows"][0]["family"] = value
    (tmp_path / "bad.json").write_text(json.dumps(payload))
    assert_refused(rooflint("compare", "bad.json", "bad.json", tmp_path=tmp_path), f"row 1: family is a JSON {kind}")


@pytest.mark.parametrize("cell", ["1_000", "１２"])
def test_a_number_spelt_as_no_results_file_writes_it_is_refused(tmp_path, cell):
    """Python's float() read "1_000" as 1000 and full-width "１２" as 12: a cell that shows one number
    read as another, where every other cell that is not a number is refused."""
    results = write(run(), tmp_path / "run")
    bad = rewritten(results, tmp_path / "bad.csv", lambda rows: rows[0].update(n_samples=cell))
    assert_refused(rooflint("lint", bad, tmp_path=tmp_path), f"bad.csv line 2: n_samples {cell!r} is not a number")


@pytest.mark.parametrize("column", ["family", "p20_ms"])
def test_a_column_spelt_in_another_case_is_named(tmp_path, column):
    """A header "Family" passed the check for required columns (made in lower case), then every row
    was refused as "family is empty"; "P20_ms" was kept as a column of its own and every row read as
    having no spread, so compare judged a change by the threshold alone."""
    results = write(run(), tmp_path / "run")
    text = results.read_text().replace(column, column.capitalize(), 1)
    (tmp_path / "edited.csv").write_text(text)
    wanted = f"edited.csv line 1: column {column.capitalize()!r} is not spelt as rooflint writes it; valid: {column!r}"
    assert_refused(rooflint("compare", results, "edited.csv", tmp_path=tmp_path), wanted)
