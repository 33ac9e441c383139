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


def test_probing_a_missing_output_folder_creates_and_removes_nothing(tmp_path):
    """The probe of a missing --out created the folder, wrote a probe file and removed the folder: a
    second process probing the same folder at once (two commands, two test workers) lost the folder
    under its probe file and was refused "No such file or directory". Now nothing is created."""
    from rooflint.core.errors import UserError
    from rooflint.core.paths import probe_output_dir, probe_writable_file

    target = tmp_path / "a" / "b"
    probe_output_dir(target)
    probe_writable_file(target / "report.md", "report")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match="f is a file, not a folder"):
        probe_output_dir(tmp_path / "f" / "out")
    with pytest.raises(UserError, match="f is a file, not a folder"):
        probe_writable_file(tmp_path / "f" / "out" / "report.md", "report")
    existing = tmp_path / "there"
    existing.mkdir()
    probe_output_dir(existing)  # an existing folder still gets a probe file of its own, then none is left
    assert list(existing.iterdir()) == []


@pytest.mark.parametrize("size", ["n=4096,", "n=4096,,n=8", ",n=4096"])
def test_a_size_with_a_comma_too_many_says_so(tmp_path, size):
    """`--size n=4096,` was refused as "unknown size key ''": a key the user never typed."""
    assert_refused(
        run_in(tmp_path, "bench", "vector_add", "--device", "cpu", "--size", size), "empty entry between commas"
    )
