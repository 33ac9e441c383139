"""bench, merge and the readers of what they write, run as a user runs them: the installed console
script in a subprocess. Each case is a bug found that way: a family or dtype named twice measured
twice, a plugin that exits at import passing `bench all` with nothing run, a merge stopped midway
leaving a shorter file that read as complete.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import cpu_ceilings
from console_script import ROOFLINT, assert_refused, needs_console_script
from result_factory import read_csv, row, write

pytestmark = needs_console_script

FIXTURES = Path(__file__).parent / "fixtures"


def _env(tmp_path: Path, family_modules: str | None = None, path: Path | None = None) -> dict[str, str]:
    env = dict(os.environ, ROOFLINT_CACHE=str(tmp_path / "cache"), COLUMNS="200")
    cpu_ceilings.seed(env["ROOFLINT_CACHE"])
    env.pop("ROOFLINT_DEBUG", None)
    env.pop("ROOFLINT_FAMILY_MODULES", None)
    if family_modules:
        env["ROOFLINT_FAMILY_MODULES"] = family_modules
        folders = [str(path or FIXTURES), str(FIXTURES), os.environ.get("PYTHONPATH")]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, folders))
    return env


def rooflint(*argv, tmp_path: Path, family_modules: str | None = None, path: Path | None = None):
    return subprocess.run(
        [ROOFLINT, *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=_env(tmp_path, family_modules, path),
        check=False,
    )


def test_a_family_or_dtype_named_twice_is_measured_once(tmp_path):
    # `bench fragile fragile --dtype fp32,fp32` measured every row four times and wrote four rows of
    # one key, which compare then had to drop as duplicates.
    out = tmp_path / "out"
    done = rooflint(
        "bench", "fragile", "fragile", "--dtype", "fp32,fp32", "--variants", "eager", "--device", "cpu",
        "--size", "small", "--no-plots", "--out", out, tmp_path=tmp_path, family_modules="fragile_family",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = read_csv(out / "results.csv")
    assert [(r["family"], r["variant"], r["dtype"], r["status"]) for r in rows] == [("fragile", "eager", "fp32", "ok")]


def test_a_plugin_that_exits_at_import_is_refused_not_a_pass(tmp_path):
    # sys.exit(0) (or an argparse at module level) in a plugin ended `rooflint bench all` at once,
    # exit 0, nothing run and nothing said: a CI job passed on no rows.
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "exits_at_import.py").write_text("import sys\n\nsys.exit(0)\n")
    out = tmp_path / "out"
    for argv in (("bench", "all", "--device", "cpu", "--out", out), ("list",)):
        done = rooflint(*argv, tmp_path=tmp_path, family_modules="exits_at_import", path=plugins)
        assert_refused(done, "exits_at_import", "exits at import")
    assert not (out / "results.csv").exists()


def test_a_merge_stopped_while_writing_leaves_the_old_file_not_a_shorter_one(tmp_path):
    # The merged file was written in place: SIGTERM (or Ctrl-C) midway left the rows written so far,
    # a complete-looking CSV with fewer rows that every reader then took as the whole merge.
    source = write([row(shape=f"n={i}") for i in range(20000)], tmp_path / "big")
    merged = write([row(shape=f"n={i}") for i in range(3)], tmp_path / "old")
    before = merged.read_bytes()
    names = set(os.listdir(merged.parent))
    merging = subprocess.Popen(
        [ROOFLINT, "merge", str(source), "--out", str(merged)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path),
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while merging.poll() is None and time.monotonic() < deadline:
        # Writing has begun: the file changed, or a new file appeared beside it.
        if merged.stat().st_size != len(before) or set(os.listdir(merged.parent)) != names:
            time.sleep(0.05)
            merging.send_signal(signal.SIGTERM)
            break
        time.sleep(0.005)
    merging.communicate(timeout=60)
    assert merging.returncode == 130
    if merged.read_bytes() != before:  # the signal came after the file was whole: all of it, then
        assert len(read_csv(merged)) == 20000
    assert set(os.listdir(merged.parent)) == names  # no partial file left beside it


def test_a_run_stopped_before_its_first_row_never_pushes_the_last_results_out_of_prev(tmp_path):
    # A run stopped before its first row left a header-only results.csv; the next run moved that
    # over results.prev.csv, and the last run that measured anything was gone from the folder.
    out = tmp_path / "out"
    bench = (
        "bench",
        "fragile",
        "--variants",
        "eager",
        "--device",
        "cpu",
        "--size",
        "small",
        "--no-plots",
        "--out",
        out,
    )
    first = rooflint(*bench, tmp_path=tmp_path, family_modules="fragile_family")
    assert first.returncode == 0, first.stdout + first.stderr
    measured = (out / "results.csv").read_text()
    # `slow` held at its build (ROOFLINT_TEST_HOLD names a file never made): no row can land before
    # the signal, however loaded the machine is.
    held = [*bench[:2], "--variants", "slow", *bench[4:]]
    stopped = subprocess.Popen(
        [ROOFLINT, *map(str, held)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env=dict(_env(tmp_path, "fragile_family"), ROOFLINT_TEST_HOLD=str(tmp_path / "never")),
    )  # fmt: skip
    deadline = time.monotonic() + 60
    # Its own results.csv is open (the last one moved aside): stopped now, before the worker's first row.
    while not ((out / "results.prev.csv").exists() and (out / "results.csv").exists()):
        assert stopped.poll() is None and time.monotonic() < deadline, stopped.communicate()
        time.sleep(0.002)
    stopped.send_signal(signal.SIGINT)
    stopped.communicate(timeout=60)
    assert stopped.returncode == 130
    assert read_csv(out / "results.csv") == []
    again = rooflint(*bench, tmp_path=tmp_path, family_modules="fragile_family")
    assert again.returncode == 0, again.stdout + again.stderr
    assert (out / "results.prev.csv").read_text() == measured
    assert len(read_csv(out / "results.csv")) == 1
