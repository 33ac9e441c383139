"""Measured ceilings and --roof, run as a user runs them: the installed console script in a
subprocess. Each case is a bug found that way: a stored <gpu>.toml holding nan, inf, true, a
misspelt field, no value at all or binary bytes judged against (or crashing on) instead of refused,
and an empty --roof taken as the datasheet.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from console_script import assert_refused, needs_console_script, run_in
from result_factory import row, write

pytestmark = needs_console_script


def rooflint(*argv, tmp_path: Path) -> subprocess.CompletedProcess:
    return run_in(tmp_path, *argv, timeout=120)


def store(tmp_path: Path, body: str | bytes) -> Path:
    """h100_sxm.toml in the cache `rooflint ceilings` writes to."""
    path = tmp_path / "cache" / "ceilings" / "h100_sxm.toml"
    path.parent.mkdir(parents=True)
    if isinstance(body, bytes):
        path.write_bytes(body)
    else:
        path.write_text(f'[h100_sxm]\nname = "NVIDIA H100 80GB HBM3"\n{body}')
    return path


@pytest.mark.parametrize(
    "body, expected",
    [
        ("memory_bandwidth_gbps = { value = nan, source = 'x' }\n", "must be a finite positive number"),
        ("memory_bandwidth_gbps = { value = inf, source = 'x' }\n", "must be a finite positive number"),
        ("memory_bandwidth_gbps = { value = true, source = 'x' }\n", "must be a finite positive number"),
        # A misspelt field was skipped: the datasheet's bandwidth judged and labelled "measured ceilings".
        ("memory_bandwidth_gbs = { value = 2959.0, source = 'x' }\n", "unknown field 'memory_bandwidth_gbs'"),
        ("", "holds no measured ceilings"),
        (b"\xff\xfe\x00binary", "is not text"),  # was an internal UnicodeDecodeError, exit 1
    ],
)
def test_a_broken_stored_ceilings_file_is_refused_not_judged_against(tmp_path, body, expected):
    results = write([row("vector_add", "triton", 1.0)], tmp_path / "run")
    path = store(tmp_path, body)
    assert_refused(rooflint("lint", results, "--roof", "measured", tmp_path=tmp_path), str(path), expected)
    # The roofline draws the cached ceilings beside the datasheet's: a nan roof was drawn silently.
    done = rooflint("roofline", results, "--out", "plots", tmp_path=tmp_path)
    assert_refused(done, str(path), expected)


def test_stored_ceilings_as_rooflint_writes_them_are_still_read(tmp_path):
    results = write([row("vector_add", "triton", 1.0)], tmp_path / "run")
    store(
        tmp_path,
        "memory_bandwidth_gbps = { value = 2959, source = 'x' }\ncopy_bandwidth_gbps = { value = 2800, source = 'x' }\n"
        "read_bandwidth_gbps = { value = 2959, source = 'x' }\nl2_bandwidth_gbps = { value = 5751, source = 'x' }\n",
    )
    done = rooflint("lint", results, "--roof", "measured", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "measured ceilings" in done.stdout


@pytest.mark.parametrize("command", ["lint", "bench"])
def test_an_empty_roof_is_refused_not_read_as_the_datasheet(tmp_path, command):
    # --roof "$ROOF" with ROOF unset judged every row against the datasheet and said so, exit 0.
    if command == "lint":
        argv = ["lint", write([row("vector_add", "triton", 1.0)], tmp_path / "run")]
    else:
        argv = ["bench", "vector_add", "--device", "cpu", "--size", "small", "--out", "b"]
    assert_refused(rooflint(*argv, "--roof", "", tmp_path=tmp_path), "--roof is empty", "datasheet, measured")
    assert not (tmp_path / "b").exists()


def test_a_folder_in_the_place_of_the_stored_toml_is_refused_before_measuring(tmp_path):
    # Was refused only after the measuring (a minute on a GPU), as "Is a directory" with no way out.
    (tmp_path / "ceil" / "cpu.toml").mkdir(parents=True)
    done = rooflint("ceilings", "--device", "cpu", "--out", "ceil", tmp_path=tmp_path)
    assert_refused(done, "ceil/cpu.toml: it is a directory", "give another --out")
    assert done.stdout == ""
