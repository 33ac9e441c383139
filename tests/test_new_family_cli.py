"""`rooflint new-family`, run as a user runs it: the command it prints pastes into a shell as it is."""

from __future__ import annotations

import shlex
import subprocess

from console_script import ROOFLINT, needs_console_script

pytestmark = needs_console_script


def test_the_printed_command_names_a_folder_with_a_space_as_one_word(tmp_path):
    out = tmp_path / "my kernels"
    done = subprocess.run([ROOFLINT, "new-family", "spaced_pair", "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("try it: ")]
    words = shlex.split(line.removeprefix("try it: "))
    assert words[:2] == ["cd", str(out)] and words[2] == "&&"
    assert (out / "spaced_pair.py").is_file()
