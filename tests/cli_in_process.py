"""`rooflint ARGS` through the console script's own entry point (rooflint.cli.main: its one-line errors
and exit codes), in this process. A subprocess pays for a Python and the tool's imports, seconds on a
2-core CI runner; each command keeps at least one case through the installed script in a subprocess,
which proves the script behaves as this entry point does."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path


def rooflint_in_process(
    *arguments: str, env: dict[str, str] | None = None, cwd: Path | str | None = None
) -> subprocess.CompletedProcess:
    """Run rooflint.cli.main with these arguments, ``env`` added to the environment and ``cwd`` as the
    working folder (both put back after); stdout, stderr and the exit code as a CompletedProcess."""
    from rooflint.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_environment, saved_argv, saved_cwd = dict(os.environ), sys.argv, os.getcwd()
    os.environ.update(env or {})
    sys.argv = ["rooflint", *arguments]
    code: int = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    finally:
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_environment)
    return subprocess.CompletedProcess(["rooflint", *arguments], code, out.getvalue(), err.getvalue())
