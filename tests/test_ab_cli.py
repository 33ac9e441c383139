"""`rooflint ab` on the CPU: entries checked against float64 (a failing one reported and dropped, never
timed), timed in alternating rounds, summarised in a table and a CSV; entries from variants,
meta-parameter sets, source files and git refs; bad input as one line and exit 2.

The git refs (each ref's copy imports its own helpers, which a fresh process keeps apart) and one
bad input go through the installed console script in a subprocess; the rest, the end-to-end run of
both regimes too, through the same entry point in this process (tests/cli_in_process.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_in_process import rooflint_in_process
from console_script import ROOFLINT, needs_console_script
from result_factory import read_csv

FIXTURES = Path(__file__).parent / "fixtures"

pytestmark = [
    needs_console_script,
    pytest.mark.xdist_group("cli_ab"),
]


def ab(*arguments: str, modules: str = "ab_family", path: Path = FIXTURES, cwd: Path | None = None):
    """The installed console script in a subprocess."""
    env = {**os.environ, "ROOFLINT_FAMILY_MODULES": modules, "TRITON_INTERPRET": "1", "COLUMNS": "200"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [ROOFLINT, "ab", *arguments], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )  # fmt: skip


@pytest.fixture
def ab_here(monkeypatch):
    """`rooflint ab` in this process, with the fixture families importable (ab_family is the same
    module for every case, so importing it once is what a fresh process would do too)."""
    monkeypatch.syspath_prepend(str(FIXTURES))

    def run(*arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        env = {"ROOFLINT_FAMILY_MODULES": "ab_family", "TRITON_INTERPRET": "1", "COLUMNS": "200"}
        return rooflint_in_process("ab", *arguments, env=env, cwd=cwd)

    return run


def test_two_builtin_variants_in_both_regimes_end_to_end(tmp_path, ab_here, monkeypatch):
    from rooflint.engine import timing

    # In this process, so that the sustained regime's CPU heat-up (2 s an entry a round, 8 s of this
    # run's 13 s) can be shortened: it still runs before every sustained timing, and the heat-up's
    # own length is tests/test_timing.py's. The git refs' runs below go through the console script.
    monkeypatch.setattr(timing, "HEAT_MIN_S", 0.2)
    out = tmp_path / "ab.csv"
    done = ab_here("softmax", "-V", "eager,eager_unfused", "--size", "rows=8,cols=64", "--dtype", "fp32",
                   "--device", "cpu", "--rounds", "2", "--csv", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "softmax fp32 rows=8,cols=64 on cpu: 2 rounds" in done.stdout
    rows = read_csv(out)
    assert [(r["regime"], r["entry"]) for r in rows] == [
        ("burst", "eager"), ("burst", "eager_unfused"), ("sustained", "eager"), ("sustained", "eager_unfused")
    ]  # fmt: skip
    for regime in ("burst", "sustained"):
        first, second = (r for r in rows if r["regime"] == regime)
        assert first["verdict"] == "baseline" and float(first["speedup_vs_first"]) == 1.0
        assert second["verdict"] in ("faster", "slower", "within noise")
        assert float(second["speedup_low"]) <= float(second["speedup_vs_first"]) <= float(second["speedup_high"])
        assert int(first["wins"]) + int(second["wins"]) == 2
    for row in rows:
        assert row["joules_per_call"] == ""  # no NVML on a CPU: n/a, never a made-up number
        assert len(row["rounds_ms"].split()) == 2 and all(float(ms) > 0 for ms in row["rounds_ms"].split())
        assert float(row["median_ms"]) > 0
    assert "n/a" in done.stdout


def test_a_failing_entry_is_reported_dropped_and_never_timed(tmp_path, ab_here):
    out = tmp_path / "ab.csv"
    done = ab_here("abtoy", "-V", "eager,wrong,added", "--device", "cpu", "--rounds", "2", "--regime", "burst",
              "--csv", str(out))  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "wrong" in done.stdout and "failed its float64 check" in done.stdout and "exceeds tolerance" in done.stdout
    assert [r["entry"] for r in read_csv(out)] == ["eager", "added"]


def test_config_sets_reach_the_builder_as_a_cross_product(tmp_path, ab_here):
    out = tmp_path / "ab.csv"
    done = ab_here("abtoy", "-V", "chunked", "--config", "chunk=0,512,1024", "--device", "cpu", "--rounds", "2",
              "--regime", "burst", "--csv", str(out))  # fmt: skip
    # chunk=0 makes the builder raise: that entry is dropped with the builder's own words, the rest timed.
    assert done.returncode == 1, done.stderr
    assert "chunked chunk=0" in done.stdout and "chunk must be 1 or more" in done.stdout
    assert [r["entry"] for r in read_csv(out)] == ["chunked chunk=512", "chunked chunk=1024"]


def test_a_variant_that_takes_no_config_runs_once_beside_one_that_does(tmp_path, ab_here):
    # `-V cuda_hopper,flash_attn_4 --config V_WAIT_LATE=0,1`: the config set applies to the variants that take
    # one; a library peer (or any builder without a config) is one plain entry beside them.
    out = tmp_path / "ab.csv"
    done = ab_here("abtoy", "-V", "eager,chunked", "--config", "chunk=512,1024", "--device", "cpu", "--rounds", "2",
                   "--regime", "burst", "--csv", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [r["entry"] for r in read_csv(out)] == ["eager", "chunked chunk=512", "chunked chunk=1024"]


def test_two_source_files_of_one_family(tmp_path, ab_here):
    old, new = tmp_path / "old" / "ab_family.py", tmp_path / "new" / "ab_family.py"
    for path in (old, new):
        path.parent.mkdir()
        shutil.copy(FIXTURES / "ab_family.py", path)
    text = new.read_text().replace("return lambda: x + x", "return lambda: x * 2.5")
    new.write_text(text)  # the new file breaks `added`: only its entry may fail
    done = ab_here("abtoy", "-V", "added", "--source", str(old), "--source", str(new), "--device", "cpu",
              "--rounds", "2", "--regime", "burst")  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert f"added@{new}" in done.stdout and "failed its float64 check" in done.stdout
    assert f"added@{old}: " not in done.stdout  # same file name in two folders: labelled by path


def git(repo: Path, *arguments: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=ab", "-c", "user.email=ab@example.com", *arguments],
                   check=True, capture_output=True)  # fmt: skip


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git checkout holding the family package `abpkg` at two commits: at the first its helper's
    FACTOR is 2 (right), at the second 3 (wrong). The family imports the helper by its package name."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path / "repo"
    package = root / "abpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    family = (FIXTURES / "ab_family.py").read_text().replace('"abtoy"', '"abref"')
    family = family.replace("return lambda: x + x", "return lambda: x * FACTOR")
    (package / "fam.py").write_text("from abpkg.helper import FACTOR\n" + family)
    (package / "helper.py").write_text("FACTOR = 2\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "right")
    (package / "helper.py").write_text("FACTOR = 3\n")
    git(root, "commit", "-q", "-am", "wrong")
    return root


def test_one_variant_at_git_refs_and_the_worktree_imports_each_ones_own_helpers(repo, tmp_path):
    # One run for three sources: HEAD~1, HEAD and the installed tree with an uncommitted fix.
    (repo / "abpkg" / "helper.py").write_text("FACTOR = 2\n")  # an uncommitted fix
    out = tmp_path / "ab.csv"
    done = ab("abref", "-V", "added,eager", "--ref", "HEAD~1", "--ref", "HEAD", "--ref", "worktree", "--device", "cpu",
              "--rounds", "2", "--regime", "burst", "--csv", str(out), modules="abpkg.fam", path=repo)  # fmt: skip
    assert done.returncode == 1, done.stderr
    # HEAD~1's copy imported HEAD~1's helper (FACTOR 2) and passed; HEAD's (FACTOR 3) failed, its
    # commit still wrong; the worktree names the installed family, fixed.
    assert "added@HEAD " in done.stdout and "failed its float64 check" in done.stdout
    assert [r["entry"] for r in read_csv(out)] == [
        "added@HEAD~1",
        "eager@HEAD~1",
        "eager@HEAD",
        "added@worktree",
        "eager@worktree",
    ]


def test_an_unknown_ref_is_one_line_and_exit_2(repo):
    done = ab("abref", "-V", "eager", "--ref", "no-such-ref", "--ref", "HEAD", "--device", "cpu",
              modules="abpkg.fam", path=repo)  # fmt: skip
    assert done.returncode == 2 and "unknown git ref 'no-such-ref'" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


BAD = [
    ("unknown_family", ["nosuch", "-V", "a,b"], "unknown family 'nosuch'"),
    ("unknown_variant", ["abtoy", "-V", "eager,nosuch"], "unknown variant 'nosuch' of abtoy; valid: eager"),
    ("one_entry", ["abtoy", "-V", "eager"], "ab compares two or more entries"),
    ("no_variants", ["abtoy"], "ab needs --variants"),
    ("ref_of_a_top_level_module", ["abtoy", "-V", "eager", "--ref", "HEAD~1", "--ref", "HEAD"],
     "--ref needs family abtoy inside a package"),
    ("unreadable_source", ["abtoy", "-V", "eager", "--source", "/nonexistent/a.py", "--source", "b.py"],
     "--source /nonexistent/a.py: not a readable .py file"),
    ("ref_and_source", ["abtoy", "-V", "eager", "--ref", "HEAD", "--source", "a.py"],
     "give --ref or --source, not both"),
    ("malformed_config", ["abtoy", "-V", "chunked", "--config", "chunk"], "malformed --config 'chunk'"),
    ("config_unknown_name", ["abtoy", "-V", "chunked", "--config", "BLOCK=1,2"],
     "has no meta-parameter BLOCK; valid: chunk"),
    ("config_not_taken", ["abtoy", "-V", "eager", "--config", "chunk=1,2"], "variant eager of abtoy takes no --config"),
    ("one_round", ["abtoy", "-V", "eager,added", "--rounds", "1"], "--rounds 1"),
    ("bad_regime", ["abtoy", "-V", "eager,added", "--regime", "warm"], "unknown regime 'warm'"),
    ("bad_dtype", ["abtoy", "-V", "eager,added", "--dtype", "fp8"], "abtoy has no dtype 'fp8'; valid: fp32"),
    ("gpu_variant_on_cpu", ["softmax", "-V", "eager,triton", "--device", "cpu", "--dtype", "fp32"],
     "entry triton needs a CUDA GPU"),
    ("csv_is_a_folder", ["abtoy", "-V", "eager,added", "--csv", "."], "--csv . is a folder"),
]  # fmt: skip


@pytest.mark.parametrize("arguments, says", [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_input_is_one_line_and_exit_2(arguments, says, tmp_path, ab_here):
    # In this process; test_an_unknown_ref_is_one_line_and_exit_2 is the console script's case.
    done = ab_here(*arguments, *([] if "--device" in arguments else ["--device", "cpu"]), cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_table_shows_each_entry_s_clock_and_power_as_whole_numbers():
    # On a GPU NVML reads them; "1.96e+03" would hide the 10-20 MHz that tell two entries apart.
    from types import SimpleNamespace

    from rich.console import Console

    from rooflint.analysis.ab_stats import Sample, summarize
    from rooflint.cli.commands.ab import _table

    samples = [Sample("n=8", "burst", r, "a", 1.0, 0.5, 1960.4, 331.7) for r in range(3)]
    samples += [Sample("n=8", "burst", r, "b", 1.1) for r in range(3)]
    outcome = SimpleNamespace(family="toy", dtype="bf16", device_name="GPU", summaries=summarize(samples))
    console = Console(width=200, record=True)
    console.print(_table(outcome, "n=8"))
    lines = [line for line in console.export_text().splitlines() if line.count("│") > 5]
    cells = {row[1]: row for row in ([cell.strip() for cell in line.split("│")[1:-1]] for line in lines)}
    assert cells["a"][6:9] == ["0.5", "1960", "332"]  # J/call, MHz, W
    assert cells["b"][6:9] == ["n/a", "n/a", "n/a"]  # nothing read (a CPU)
