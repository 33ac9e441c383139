"""The installed `rooflint` console script, run as a user runs it: the one beside this Python (the
venv's), else the first on PATH. Tests that drive it in a subprocess are skipped, saying why, where
the checkout is imported without being installed."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

_BESIDE = Path(sys.executable).with_name("rooflint")
ROOFLINT = str(_BESIDE) if _BESIDE.exists() else shutil.which("rooflint")

needs_console_script = pytest.mark.skipif(ROOFLINT is None, reason="no installed `rooflint` console script on PATH")
