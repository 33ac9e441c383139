"""What the docs promise, run as a user runs it: the installed console script in a subprocess. Each
case is a documented behaviour that the program did not keep."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

from console_script import assert_refused, needs_console_script, run_in
from result_factory import row, run, write

from rooflint.outputs.results import ERROR, OK

pytestmark = needs_console_script


def rooflint(*argv, cwd: Path) -> subprocess.CompletedProcess:
    return run_in(cwd, *argv)


def test_an_infinite_rel_error_outside_a_failed_row_is_refused(tmp_path):
    # docs/lint.md: exit 2 on "an infinite number anywhere but a failed row's `rel_error`". An ok row
    # with rel_error inf was read, and linted clean (exit 0): correctness_failed skips a non-finite error.
    for status in (OK, ERROR):
        rows = run()
        rows[0] = row("vector_add", "eager", status=status, rel_error=math.inf, tolerance=0.016)
        results = write(rows, tmp_path / status)
        assert_refused(rooflint("lint", results, cwd=tmp_path), "line 2", "rel_error inf", f"status {status}")
        assert_refused(rooflint("report", results, cwd=tmp_path), "rel_error inf")
