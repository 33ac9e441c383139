"""GPU tier: `rooflint ab` on real variants, through the installed console script: the Triton
softmax against PyTorch's in both regimes with NVML energy, and the Triton softmax under several
meta-parameter sets."""

from __future__ import annotations

import csv
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rooflint.engine import nvml

pytestmark = pytest.mark.gpu

_SCRIPT = Path(sys.executable).with_name("rooflint")
ROOFLINT = str(_SCRIPT) if _SCRIPT.exists() else shutil.which("rooflint")


def ab(*arguments: str) -> subprocess.CompletedProcess:
    if ROOFLINT is None:
        pytest.skip("no installed `rooflint` console script on PATH")
    env = {**os.environ, "TRITON_INTERPRET": "0", "COLUMNS": "200"}
    return subprocess.run([ROOFLINT, "ab", *arguments], capture_output=True, text=True, env=env, timeout=540)


def rows_of(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_two_variants_in_both_regimes_with_energy(tmp_path):
    out = tmp_path / "ab.csv"
    done = ab("softmax", "-V", "eager,triton", "--size", "rows=4096,cols=4096", "--dtype", "bf16", "--rounds", "3",
              "--csv", str(out))  # fmt: skip
    print(done.stdout)
    assert done.returncode == 0, done.stderr
    rows = rows_of(out)
    assert [(r["regime"], r["entry"]) for r in rows] == [
        ("burst", "eager"), ("burst", "triton"), ("sustained", "eager"), ("sustained", "triton")
    ]  # fmt: skip
    for row in rows:
        assert float(row["median_ms"]) > 0 and len(row["rounds_ms"].split()) == 3
        assert float(row["speedup_low"]) <= float(row["speedup_vs_first"]) <= float(row["speedup_high"])
    if nvml.open_device()[0] is not None:  # NVML's energy counter: joules per call for every entry
        assert all(math.isfinite(float(r["joules_per_call"])) and float(r["joules_per_call"]) > 0 for r in rows)


def test_the_triton_softmax_under_meta_parameter_sets(tmp_path):
    out = tmp_path / "ab.csv"
    done = ab("softmax", "-V", "triton", "--size", "rows=8192,cols=1024", "--config", "BLOCK_R=1,2,3",
              "--config", "num_warps=4,8", "--rounds", "2", "--regime", "burst", "--csv", str(out))  # fmt: skip
    print(done.stdout)
    # BLOCK_R=3 cannot build its tl.arange: those two entries are reported, dropped and never timed.
    assert done.returncode == 1, done.stderr
    assert "triton BLOCK_R=3,num_warps=4" in done.stdout and "failed its float64 check" in done.stdout
    assert [r["entry"] for r in rows_of(out)] == [
        "triton BLOCK_R=1,num_warps=4", "triton BLOCK_R=1,num_warps=8",
        "triton BLOCK_R=2,num_warps=4", "triton BLOCK_R=2,num_warps=8",
    ]  # fmt: skip


def _kernels_git_checkout() -> str | None:
    """Why --ref cannot run here, or None: engine/ab exports the folder of the installed
    rooflint.kernels with git, so that folder (not this test file's) must be in a git work tree."""
    if shutil.which("git") is None:
        return "git is not on PATH: --ref needs it"
    import rooflint.kernels

    container = Path(rooflint.kernels.__file__).parent
    top = subprocess.run(["git", "-C", str(container), "rev-parse", "--show-toplevel"], capture_output=True)
    if top.returncode != 0:
        return f"--ref HEAD: {container} is not inside a git checkout (rooflint is installed non-editably)"
    # A venv inside a checkout passes rev-parse, but its site-packages copy is not tracked: git archive has nothing.
    tracked = subprocess.run(["git", "-C", str(container), "ls-files", "--", "."], capture_output=True, text=True)
    if not tracked.stdout.strip():
        return f"--ref HEAD: {container} is not tracked by its git checkout (rooflint is installed non-editably)"
    return None


def test_the_installed_family_against_its_last_commit(tmp_path):
    reason = _kernels_git_checkout()
    if reason is not None:
        pytest.skip(reason)
    done = ab("softmax", "-V", "triton", "--ref", "HEAD", "--ref", "worktree", "--size", "rows=4096,cols=4096",
              "--rounds", "2", "--regime", "burst")  # fmt: skip
    print(done.stdout)
    assert done.returncode == 0, done.stderr
    assert "triton@HEAD" in done.stdout and "triton@worktree" in done.stdout
