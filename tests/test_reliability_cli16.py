"""Every command's output path given empty, run as a user runs it (the installed console script in a
subprocess): "" becomes Path("."), so before each command wrote into the current folder without a
word (`roofline --out ""`, `ceilings --out ""`, `new-family --out ""`) or refused it as ".", a
path the caller never typed. Now each says the option is empty and what is valid, and writes nothing."""

from __future__ import annotations

import pytest
from console_script import assert_refused, needs_console_script, run_in
from result_factory import run, write

pytestmark = needs_console_script

CASES = {
    "roofline": ("roofline", "{csv}", "--out", ""),
    "ceilings": ("ceilings", "--device", "cpu", "--out", ""),
    "doctor": ("doctor", "--json", ""),
    "report": ("report", "{csv}", "--out", ""),
    "compare": ("compare", "{csv}", "{csv}", "--out", ""),
    "merge": ("merge", "{csv}", "--out", ""),
    "new-family": ("new-family", "my_op", "--out", ""),
    "model": ("model", "gpt2", "--device", "cpu", "--out", " "),
    "profile": ("profile", "softmax", "--device", "cpu", "--out", ""),
}


@pytest.mark.parametrize("command", CASES)
def test_an_empty_output_path_is_refused_and_nothing_is_written(tmp_path, command):
    results = write(run(), tmp_path / "in")
    folder = tmp_path / "cwd"
    folder.mkdir()
    argv = [part.format(csv=results) for part in CASES[command]]
    done = run_in(folder, *argv)
    option = "--json" if command == "doctor" else "--out"
    assert_refused(done, f"{option} is empty")
    assert sorted(path.name for path in folder.iterdir() if path.name != "cache") == []
