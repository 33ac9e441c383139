"""`rooflint ab --csv` where no file can be created: refused before any round is timed (one line,
exit 2), not found after the A/B's minutes as an internal error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from console_script import ROOFLINT, assert_refused, needs_console_script

FIXTURES = Path(__file__).parent / "fixtures"

pytestmark = [needs_console_script, pytest.mark.xdist_group("cli_ab")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc, a folder no file can be made in")
def test_a_csv_in_a_folder_that_takes_no_file_is_refused_before_the_rounds():
    # /proc exists (so making the folder succeeds) but takes no new file, even for root, where a
    # read-only folder would not stop the write.
    env = {**os.environ, "ROOFLINT_FAMILY_MODULES": "ab_family", "COLUMNS": "200"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FIXTURES), os.environ.get("PYTHONPATH")]))
    arguments = ["abtoy", "-V", "eager,added", "--device", "cpu", "--rounds", "2", "--regime", "burst"]
    command = [ROOFLINT, "ab", *arguments, "--csv", "/proc/rooflint-ab.csv"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert_refused(done, "/proc/rooflint-ab.csv")
    assert "round" not in done.stderr and not done.stdout.strip()  # nothing was timed
