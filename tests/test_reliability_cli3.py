"""Commands used as a demanding new user uses them, through the installed console script: each test
is a bug found that way (an option given twice, a path that is a file, a name bench reads otherwise)."""

from __future__ import annotations

import csv
import html
import re
import subprocess
from pathlib import Path

from console_script import ROOFLINT, assert_refused, needs_console_script
from result_factory import row, run, write

pytestmark = needs_console_script


def rooflint(*args: str, cwd: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([ROOFLINT, *args], capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd)


def test_a_regime_named_twice_is_timed_once_per_round(tmp_path):
    # Timed twice per round, `--rounds 2` read as 4 rounds: 4/4 wins, an interval from non-rounds.
    table = tmp_path / "ab.csv"
    done = rooflint(
        "ab", "softmax", "-V", "eager,eager_unfused", "--device", "cpu", "--size", "small",
        "--rounds", "2", "--regime", "burst,burst", "--csv", str(table),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = list(csv.DictReader(table.open()))
    assert [(r["regime"], r["entry"], r["rounds"]) for r in rows] == [
        ("burst", "eager", "2"),
        ("burst", "eager_unfused", "2"),
    ]
    assert all(len(r["rounds_ms"].split()) == 2 for r in rows)


def test_roofline_refuses_a_ceilings_folder_that_is_not_one(tmp_path):
    results = write(run(), tmp_path / "run")
    (tmp_path / "h100_sxm.toml").write_text("[h100_sxm]\n")
    for given, why in (("nosuch", "does not exist"), ("h100_sxm.toml", "is a file")):
        done = rooflint("roofline", str(results), "--ceilings", given, "--out", "plots", cwd=tmp_path)
        assert_refused(done, f"--ceilings {given} {why}")
    assert not (tmp_path / "plots" / "roofline.png").exists()


def test_roofline_says_when_the_ceilings_folder_has_none_for_the_gpu(tmp_path):
    results = write(run(), tmp_path / "run")
    (tmp_path / "ceilings").mkdir()
    done = rooflint("roofline", str(results), "--ceilings", "ceilings", "--out", "plots", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "ceilings holds no h100_sxm.toml" in done.stderr


def test_an_endless_recovery_delay_is_refused(tmp_path):
    done = rooflint("bench", "vector_add", "--device", "cpu", "--recovery-delay", "inf", "--out", str(tmp_path / "o"))
    assert_refused(done, "--recovery-delay inf", "finite")
    assert not (tmp_path / "o").exists()


def test_a_bare_rooflint_shows_the_help_and_no_empty_error_line():
    done = rooflint()
    assert "Usage: rooflint" in done.stdout + done.stderr
    assert "error:" not in done.stderr and "Traceback" not in done.stderr


def test_merge_refuses_to_write_over_one_of_its_inputs(tmp_path):
    first = write(run(), tmp_path / "a")
    second = write(run(scale=1.3, spread=0.02), tmp_path / "b")
    before = first.read_bytes()
    done = rooflint("merge", str(first), str(second), "--out", str(first))
    assert_refused(done, "is also an input")
    assert first.read_bytes() == before


def test_one_family_commands_do_not_offer_all():
    for command in (["profile", "all", "--device", "cpu"], ["ab", "all", "--device", "cpu", "--rounds", "2"]):
        done = rooflint(*command)
        assert_refused(done, "unknown family 'all'", "vector_add")
        assert "or all" not in done.stderr


def test_an_output_path_through_a_file_names_that_file(tmp_path):
    results = write(run(), tmp_path / "run")
    (tmp_path / "notes").write_text("a file, not a folder")
    for command in (
        ["merge", str(results), "--out", "notes/merged.csv"],
        ["report", str(results), "--out", "notes/report.md"],
        ["compare", str(results), str(results), "--out", "notes/diff.md"],
        ["roofline", str(results), "--out", "notes/plots"],
    ):
        done = rooflint(*command, cwd=tmp_path)
        assert_refused(done, "notes is a file, not a folder")
        assert "File exists" not in done.stderr


def test_the_html_page_commands_paste_as_one_word_each_and_model_rows_have_none(tmp_path):
    rows = [
        row("vector_add", "eager", 0.6),
        row("vector_add", "a|b $(x)", 0.5, kind="triton"),
        row("model:gpt2-L2", "eager", 0.7, shape="op=step,phase=prefill,B=1,T=32"),
    ]
    results = write(rows, tmp_path / "run")
    page = tmp_path / "report.html"
    done = rooflint("report", str(results), "--format", "html", "--out", str(page))
    assert done.returncode == 0, done.stderr
    points = re.findall(r'data-family="([^"]*)" data-variant="([^"]*)"[^>]*?data-cmd="([^"]*)"', page.read_text())
    commands = {(html.unescape(f), html.unescape(v)): html.unescape(c) for f, v, c in points}
    size = "--dtype bf16 --size n=268435456"
    assert commands[("vector_add", "a|b $(x)")] == f"rooflint bench vector_add --variants 'a|b $(x)' {size}"
    assert commands[("vector_add", "eager")] == f"rooflint bench vector_add --variants eager {size}"
    assert commands[("model:gpt2-L2", "eager")] == ""  # `rooflint bench model:gpt2-L2` is no command


def test_new_family_refuses_the_name_bench_reads_as_every_family(tmp_path):
    done = rooflint("new-family", "all", "--out", str(tmp_path / "fam"))
    assert_refused(done, "'all' is reserved")
    assert not (tmp_path / "fam").exists()


def test_a_threshold_past_the_limit_says_the_limit(tmp_path):
    results = write(run(), tmp_path / "run")
    done = rooflint("compare", str(results), str(results), "--threshold", "1000")
    assert_refused(done, "bad threshold '1000'", "under 1000")


def test_a_gpu_named_for_a_cpu_run_is_refused_not_ignored(tmp_path):
    # CPU rows are judged on the CPU's measured ceilings, and its ceilings stored as cpu.toml: --gpu
    # h100_sxm changed nothing, without a word.
    done = rooflint("bench", "vector_add", "--device", "cpu", "--gpu", "h100_sxm", "--out", str(tmp_path / "b"))
    assert_refused(done, "--gpu h100_sxm", "--device cpu")
    assert not (tmp_path / "b").exists()
    done = rooflint("ceilings", "--device", "cpu", "--gpu", "h100_sxm", "--out", str(tmp_path / "c"))
    assert_refused(done, "--gpu h100_sxm", "CPU")


def test_an_option_missing_its_value_points_to_its_commands_help(tmp_path):
    # The hint named `rooflint --help`, whose page lists commands, not the option's valid values.
    done = rooflint("lint", str(tmp_path / "r.csv"), "--gpu")
    assert_refused(done, "'--gpu' requires an argument", "(see rooflint lint --help)")


def test_new_family_says_the_name_must_be_ascii(tmp_path):
    done = rooflint("new-family", "fam_é", "--out", str(tmp_path / "f"))
    assert_refused(done, "not an ASCII Python identifier", "ASCII letters")


def test_merge_counts_one_file_in_the_singular(tmp_path):
    results = write(run(), tmp_path / "one")
    done = rooflint("merge", str(results), "--out", str(tmp_path / "merged.csv"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "from 1 file " in done.stderr
