"""The installed `rooflint` console script, run as a user runs it: the one beside this Python (the
venv's), else the first on PATH. Tests that drive it in a subprocess are skipped, saying why, where
the checkout is imported without being installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import cpu_ceilings
import pytest

_BESIDE = Path(sys.executable).with_name("rooflint")
ROOFLINT = str(_BESIDE) if _BESIDE.exists() else shutil.which("rooflint")

needs_console_script = pytest.mark.skipif(ROOFLINT is None, reason="no installed `rooflint` console script on PATH")


def assert_refused(done: subprocess.CompletedProcess, *expected: str) -> None:
    """Bad input's answer: exit 2, one error line on stderr saying what was wrong (each of
    ``expected`` in it), nothing else, no traceback."""
    everything = done.stdout + done.stderr
    assert done.returncode == 2, everything
    assert "Traceback" not in everything
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), done.stderr
    for text in expected:
        assert text in done.stderr, done.stderr


def run_in(folder: Path, *argv, timeout: int = 300) -> subprocess.CompletedProcess:
    """The console script run in ``folder`` as a user runs it: its own cache there (ROOFLINT_CACHE),
    a wide terminal so a line is not wrapped, and no debug or plugin settings from the caller's env."""
    env = dict(os.environ, ROOFLINT_CACHE=str(Path(folder) / "cache"), COLUMNS="200")
    if argv and str(argv[0]) in ("bench", "model"):  # the commands that measure the CPU's ceilings
        cpu_ceilings.seed(env["ROOFLINT_CACHE"])  # measured once per test process, not again by each run
    env.pop("ROOFLINT_DEBUG", None)
    env.pop("ROOFLINT_FAMILY_MODULES", None)
    return subprocess.run(
        [ROOFLINT, *map(str, argv)], capture_output=True, text=True, timeout=timeout, cwd=folder, env=env, check=False
    )
