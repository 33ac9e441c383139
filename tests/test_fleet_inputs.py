"""Inputs a fleet carries to every worker, and the merge of what fleets write, through the installed
`rooflint` console script: a --spec-file (it travels with each task, so a bad one must be refused up
front, in one line, exit 2, no traceback, by every command that reads it), and a merged file that
rooflint must be able to read back.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from console_script import ROOFLINT, needs_console_script
from result_factory import run, write

pytestmark = [
    needs_console_script,
    pytest.mark.xdist_group("fleet_console"),
]

GPU = "[mygpu]\nmemory_bandwidth_gbps = 500\ncuda_fp32_tflops = 10\n"
# name -> (the spec file's text, what the error line must say). Each was taken before: a GPU whose
# roof was 1 GB/s (true), infinite or NaN; a `match` read letter by letter (matching nearly every
# GPU) or crashing the lookup; a quoted flag that halved a peak; a file that described nothing; a
# field above every table, dropped unread; a built-in GPU silently replaced.
SPEC_FILES = {
    "empty": ("", ["describes no GPU"]),
    "stray_field": ("memory_bandwidth_gbps = 500\n" + GPU, ["memory_bandwidth_gbps is outside any [gpu] table"]),
    "bool_value": (GPU.replace("= 500", "= true"), ["memory_bandwidth_gbps value True is not a number"]),
    "infinite": (GPU.replace("= 500", "= inf"), ["memory_bandwidth_gbps must be a finite positive number"]),
    "nan": (GPU.replace("= 10", "= nan"), ["cuda_fp32_tflops must be a finite positive number"]),
    "match_string": (GPU + 'match = "MI300X"\n', ["match must be a list of device-name substrings"]),
    "match_numbers": (GPU + "match = [1, 2]\n", ["match must be a list of device-name substrings"]),
    "quoted_flag": (
        GPU + 'tensor_bf16_tflops = { value = 100, halved_from_sparse = "no" }\n',
        ["halved_from_sparse must be true or false"],
    ),
    "builtin_key": (GPU.replace("[mygpu]", "[h100_sxm]"), ["[h100_sxm] is rooflint's own", "[h100_sxm_custom]"]),
}


def rooflint(cwd: Path, *arguments: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200", ROOFLINT_CACHE=str(cwd / "cache"))
    env.pop("ROOFLINT_DEBUG", None)
    return subprocess.run([ROOFLINT, *arguments], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def assert_one_line(done: subprocess.CompletedProcess, expected: list[str]) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), done.stderr
    for fragment in expected:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize("name", list(SPEC_FILES))
def test_a_bad_spec_file_is_one_line_and_exit_2(tmp_path, name):
    text, expected = SPEC_FILES[name]
    (tmp_path / "gpus.toml").write_text(text)
    # An unknown GPU name makes the lookup try every `match`, where [1, 2] once crashed with exit 1.
    assert_one_line(rooflint(tmp_path, "specs", "no_such_gpu", "--spec-file", "gpus.toml"), expected)


def test_a_good_spec_file_still_adds_its_gpu(tmp_path):
    (tmp_path / "gpus.toml").write_text(GPU + 'match = ["My GPU"]\n')
    done = rooflint(tmp_path, "specs", "mygpu", "--spec-file", "gpus.toml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "500" in done.stdout


def test_a_bad_spec_file_is_refused_by_lint_too(tmp_path):
    results = write(run(), tmp_path / "results")
    (tmp_path / "gpus.toml").write_text(SPEC_FILES["match_numbers"][0])
    done = rooflint(tmp_path, "lint", str(results), "--spec-file", "gpus.toml")
    assert_one_line(done, SPEC_FILES["match_numbers"][1])


def test_merge_to_an_upper_case_json_name_reads_back(tmp_path):
    results = write(run(), tmp_path / "results")
    merged = rooflint(tmp_path, "merge", str(results), "--out", "merged.JSON")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert (tmp_path / "merged.JSON").read_text().lstrip().startswith("{")  # JSON, as the reader expects
    again = rooflint(tmp_path, "merge", "merged.JSON", "--out", "again.csv")
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_scheduler_port_out_of_range_is_refused_at_once(tmp_path):
    pytest.importorskip("distributed", reason="--scheduler needs the rooflint[dask] extra")
    # Dask once spent its whole connect timeout (30 s) on port 99999, then called it a timeout.
    done = rooflint(tmp_path, "bench", "vector_add", "--device", "cpu", "--scheduler", "tcp://127.0.0.1:99999")
    assert_one_line(done, ["port 99999 is not one of 1-65535", "tcp://head:8786"])
    assert not (tmp_path / "rooflint-out" / "results.csv").exists()
