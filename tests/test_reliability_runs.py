"""Nothing wrong passes: a crashed variant fails every gate, one bench writes a folder at a time,
and a new run never takes the last results with it. Every bench runs the installed `rooflint`
console script in a subprocess, as a user or a CI job does, on the CPU; the commands that only read
its files (compare, lint, merge, report, roofline) run the script's entry point in this process
(tests/cli_in_process.py: the same exit codes and lines, without a Python and the tool's imports).

The `fragile` family (tests/fixtures/fragile_family.py) has a variant the test has killed with
SIGKILL (ROOFLINT_TEST_KILL=1) and one it holds back (ROOFLINT_TEST_SLEEP_S, ROOFLINT_TEST_HOLD),
so the crash, the interruption and the overlap are real processes, not mocks. Checks that need the
same kind of run share one: three benches in all, each slow on a 2-core runner.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import cpu_ceilings
import pytest
from cli_in_process import rooflint_in_process
from console_script import ROOFLINT, needs_console_script

FIXTURES = str(Path(__file__).parent / "fixtures")

pytestmark = [
    needs_console_script,
    pytest.mark.xdist_group("cli_runs"),
]


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(
        os.environ, ROOFLINT_CACHE=str(tmp_path / "cache"), COLUMNS="200", ROOFLINT_FAMILY_MODULES="fragile_family"
    )
    env["PYTHONPATH"] = FIXTURES + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("ROOFLINT_DEBUG", None)
    env.update(extra)
    cpu_ceilings.seed(env["ROOFLINT_CACHE"])
    return env


def rooflint(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [ROOFLINT, *args], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=environment(tmp_path, **extra)
    )


def bench(tmp_path: Path, out: str, *more: str, plots: bool = False, **extra: str) -> subprocess.CompletedProcess:
    """A CPU bench of the fragile family; without plots unless asked: matplotlib costs each run
    seconds that these tests, which read the rows, do not need."""
    options = [] if plots else ["--no-plots"]
    argv = ["bench", "fragile", "--device", "cpu", "--dtype", "fp32", "--out", out, *options, *more]
    return rooflint(tmp_path, *argv, **extra)


def read_only(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """A command that reads a bench's files, in this process, as `rooflint(folder, *args)` would run it."""
    env = environment(folder)
    return rooflint_in_process(*args, env={key: env[key] for key in ("ROOFLINT_CACHE", "COLUMNS")}, cwd=folder)


def rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as handle:
        return {row["variant"]: row for row in csv.DictReader(handle)}


def no_traceback(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr


@pytest.fixture(scope="module")
def held(tmp_path_factory) -> SimpleNamespace:
    """One whole, clean run of the fragile family into `base`, held open (its `slow` variant waits
    while built) until a second bench into the same folder has been answered."""
    root = tmp_path_factory.mktemp("held")
    release = root / "release"
    env = environment(root, ROOFLINT_TEST_HOLD=str(release))
    argv = [ROOFLINT, "bench", "fragile", "--device", "cpu", "--dtype", "fp32", "--out", "base", "--no-plots"]
    first = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = root / "base" / ".rooflint.lock"
    try:
        deadline = time.monotonic() + 120
        while not lock.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        taken = lock.exists()
        second = bench(root, "base") if taken else None
    finally:
        release.touch()
        out, err = first.communicate(timeout=300)
    assert taken, "the first bench never took the folder: " + out + err
    return SimpleNamespace(folder=root / "base", lock=lock, first=first, out=out, err=err, second=second)


@pytest.fixture(scope="module")
def base(held) -> Path:
    """The BASE the comparisons start from."""
    assert held.first.returncode == 0, held.out + held.err
    return held.folder


def test_two_benches_into_one_folder_the_second_is_refused_naming_the_first(held):
    # The second is refused by its flag checks, before torch is imported, while the first holds the folder.
    second = held.second
    assert second.returncode == 2, second.stdout + second.stderr
    errors = [line for line in second.stderr.splitlines() if line.lower().startswith("error")]
    assert len(errors) == 1 and f"pid {held.first.pid}" in errors[0] and "in use by another bench" in errors[0]
    no_traceback(second)
    # The first ran to the end, alone: its file is whole and the lock is gone.
    assert held.first.returncode == 0, held.out + held.err
    assert set(rows(held.folder / "results.csv")) == {"eager", "killed", "slow"}
    assert read_only(held.folder.parent, "lint", "base/results.csv").returncode == 0
    assert not held.lock.exists()
    # --no-plots: the rows and the run record, no roofline files.
    assert {p.name for p in held.folder.iterdir()} >= {"results.csv", "results.json"}
    assert not list(held.folder.glob("roofline*"))


@pytest.fixture(scope="module")
def rerun(tmp_path_factory, base) -> SimpleNamespace:
    """A second bench into a folder that holds BASE's results and a lock left by a dead process: two of
    the three variants, `killed` killed by SIGKILL, with --cuda-graphs and its plots (the CPU's note and
    the roofline files' names). The checks of a crash, of a lock taken over, of a new run keeping the
    last results and of a variant missing all read this one run."""
    root = tmp_path_factory.mktemp("rerun")
    shutil.copytree(base, root / "base")
    shutil.copytree(base, root / "out")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record = {"pid": dead.pid, "host": os.uname().nodename, "started": "2026-01-01T00:00:00+00:00"}
    (root / "out" / ".rooflint.lock").write_text(json.dumps(record))
    done = bench(root, "out", "--variants", "eager,killed", "--cuda-graphs", plots=True, ROOFLINT_TEST_KILL="1")
    return SimpleNamespace(root=root, out=root / "out", done=done)


def test_a_variant_killed_by_sigkill_fails_compare_lint_and_merges(rerun, tmp_path):
    new = rerun.done
    assert new.returncode == 1, new.stdout + new.stderr  # a crash fails the run
    crashed = rows(rerun.out / "results.csv")["killed"]
    assert crashed["status"] == "crashed" and "exit -9" in crashed["message"]
    # The row says where it crashed, as every measured row does: else it matches nothing in BASE.
    measured = rows(rerun.out / "results.csv")["eager"]
    for column in ("gpu", "host", "device_name", "device_index", "torch_version", "timestamp"):
        assert crashed[column] not in ("", None), column
    assert (crashed["gpu"], crashed["host"], crashed["device_name"]) == (
        measured["gpu"],
        measured["host"],
        measured["device_name"],
    )
    assert "Traceback" not in (rerun.out / "worker.log").read_text()

    compared = read_only(rerun.root, "compare", "base/results.csv", "out/results.csv")
    no_traceback(compared)
    assert compared.returncode == 1, compared.stdout + compared.stderr
    assert "## rooflint compare: FAIL" in compared.stdout  # (a CPU's jitter may add a slower row)
    killed = [line for line in compared.stdout.splitlines() if line.startswith("| fragile | killed |")]
    assert len(killed) == 1 and "**now crashed**: process died (exit -9)" in killed[0], compared.stdout

    linted = read_only(rerun.root, "lint", "out/results.csv")
    no_traceback(linted)
    assert linted.returncode == 1, linted.stdout + linted.stderr  # read, and the crash is an error finding
    assert "not_measured" in linted.stdout and "crashed" in linted.stdout

    merged_csv = tmp_path / "m.csv"
    merged = read_only(rerun.root, "merge", "base/results.csv", "out/results.csv", "out/results.json", "--out",
                       str(merged_csv))  # fmt: skip
    no_traceback(merged)
    # Merged whole, and the crash fails it too (exit 1), as it fails lint, compare and report.
    assert merged.returncode == 1 and "did not pass (1 crashed): fragile/killed" in merged.stderr, merged.stderr
    statuses = {row["variant"]: row["status"] for row in csv.DictReader(merged_csv.open())}
    assert statuses["killed"] == "crashed"  # the newer row of the key wins

    reported = read_only(rerun.root, "report", "out/results.csv")
    no_traceback(reported)
    # The report is written whole, and the crash fails it too (exit 1), as it fails lint and compare.
    assert reported.returncode == 1 and "killed (crashed" in reported.stdout
    assert "1 row did not pass (1 crashed): fragile/killed" in reported.stderr


def test_a_lock_left_by_a_dead_process_is_taken_over(rerun):
    # Exit 1 is the crash of `killed`; a bench refused the folder exits 2 and measures nothing.
    done, out = rerun.done, rerun.out
    assert done.returncode == 1, done.stdout + done.stderr
    assert "in use by another bench" not in done.stderr
    assert not (out / ".rooflint.lock").exists()
    assert {p.name for p in out.iterdir()} >= {"results.csv", "results.json"}


def test_a_new_run_keeps_the_previous_results(rerun, base):
    assert rerun.done.returncode == 1, rerun.done.stderr
    out = rerun.out
    assert (out / "results.prev.csv").read_text() == (base / "results.csv").read_text()
    assert set(rows(out / "results.csv")) == {"eager", "killed"}
    assert set(rows(out / "results.prev.csv")) == {"eager", "killed", "slow"}


def test_a_variant_missing_from_a_family_new_ran_fails_compare(rerun):
    assert rerun.done.returncode == 1, rerun.done.stderr
    compared = read_only(rerun.root, "compare", "base/results.csv", "out/results.csv")
    assert compared.returncode == 1, compared.stdout
    slow = [line for line in compared.stdout.splitlines() if line.startswith("| fragile | slow |")]
    assert len(slow) == 1 and "**now missing**" in slow[0], compared.stdout


def test_cuda_graphs_on_the_cpu_gets_a_note_and_one_roofline_name_everywhere(rerun, tmp_path):
    done = rerun.done
    assert done.returncode == 1, done.stderr
    assert "note: --cuda-graphs does nothing on the CPU" in done.stderr
    assert (rerun.out / "roofline.png").exists()
    # roofline and report name one GPU's files as bench does (read from a copy: the other tests read
    # this folder too).
    shutil.copytree(rerun.out, tmp_path / "out")
    drawn = read_only(tmp_path, "roofline", "out/results.csv", "--out", "drawn")
    assert drawn.returncode == 1, drawn.stderr  # drawn, and `killed`'s crash named and failed
    assert "not drawn: 1 row that did not pass: fragile/killed" in drawn.stderr
    assert sorted(p.name for p in (tmp_path / "drawn").glob("roofline*")) == [
        "roofline.csv",
        "roofline.png",
        "roofline.svg",
    ]
    reported = read_only(tmp_path, "report", "out/results.csv", "--out", "report/report.md")
    assert reported.returncode == 1, reported.stderr  # written whole; `killed`'s crash fails it
    assert (tmp_path / "report" / "roofline.png").exists()
    assert "](roofline.png)" in (tmp_path / "report" / "report.md").read_text()
