"""One GPU written two ways in results files' gpu column ("h100" in one, "h100_sxm" or the device
name "NVIDIA H100 80GB HBM3" in another) is one GPU to merge, report and compare, as it is to
roofline: each reads a row's GPU as the spec key its name resolves to (with report's --spec-file).
Names that resolve to nothing stay as written. Driven through the installed console script."""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest
from console_script import ROOFLINT, needs_console_script
from result_factory import row, run, write

from rooflint.core.specs import load_spec_file

pytestmark = needs_console_script

LATER = "2026-11-21T10:00:00+00:00"
H100_NAMES = ["h100", "H100 SXM", "NVIDIA H100 80GB HBM3"]  # an alias, a loose name, a device name

SPEC_FILE = """\
[mygpu]
name = "ACME MyChip 9000"
memory_bandwidth_gbps = 1000
cuda_fp32_tflops = 50
match = ["MyChip"]
"""


def rooflint(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([ROOFLINT, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120)


def later(rows):
    for item in rows:
        item.timestamp = LATER
    return rows


@pytest.mark.parametrize("name", H100_NAMES)
def test_merge_keeps_one_row_per_key_whichever_way_the_gpu_is_written(tmp_path, name):
    # The key's rows are newer: they win, and are written exactly as they were.
    old = write(run(name, slower_gpu=2.0), tmp_path / "old")
    new = write(later(run("h100_sxm")), tmp_path / "new")
    out = tmp_path / "merged.csv"
    done = rooflint("merge", old, new, "--out", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "(GPUs: h100_sxm); dropped 4 duplicate rows" in done.stderr
    pd.testing.assert_frame_equal(pd.read_csv(out), pd.read_csv(new), check_dtype=False)


def test_merge_writes_a_resolved_name_as_its_key_and_an_unknown_name_as_written(tmp_path):
    rows = later(run("NVIDIA H100 80GB HBM3"))  # newer than the key's rows: these are kept
    mystery = row(gpu="Mystery GPU", spec=load_spec_file(_spec_file(tmp_path))["mygpu"])
    first = write(run("h100_sxm") + [mystery], tmp_path / "first")
    second = write(rows, tmp_path / "second")
    out = tmp_path / "merged.csv"
    done = rooflint("merge", first, second, "--out", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    merged = pd.read_csv(out)
    assert sorted(merged["gpu"]) == ["Mystery GPU"] + ["h100_sxm"] * 4
    assert set(merged.loc[merged["gpu"] == "h100_sxm", "timestamp"]) == {LATER}


@pytest.mark.parametrize("name", H100_NAMES)
def test_report_has_one_section_per_gpu_whichever_way_it_is_written(tmp_path, name):
    a = write(run("h100_sxm"), tmp_path / "a")
    b = write(later(run(name, scale=1.5)), tmp_path / "b")
    c = write(run("a100_80gb_sxm", slower_gpu=2.0), tmp_path / "c")
    done = rooflint("report", a, b, c, "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [g["gpu"] for g in report["gpus"]] == ["a100_80gb_sxm", "h100_sxm"]
    assert report["summary"]["rows"] == 8 and report["summary"]["duplicates_dropped"] == 4
    assert all(item["gpus"] == ["a100_80gb_sxm", "h100_sxm"] for item in report["across_gpus"])
    md = rooflint("report", a, b, c, cwd=tmp_path)
    assert md.returncode == 0, md.stderr
    assert "| a100_80gb_sxm | h100_sxm |" in md.stdout and f"## {name}:" not in md.stdout


def test_report_resolves_names_with_its_spec_file(tmp_path):
    spec_file = _spec_file(tmp_path)
    spec = load_spec_file(spec_file)["mygpu"]
    keyed = write([row(gpu="mygpu", spec=spec, ceiling_source="user")], tmp_path / "keyed")
    device = row("softmax", gpu="ACME MyChip 9000", spec=spec, ceiling_source="user")
    named = write([device], tmp_path / "named")
    done = rooflint("report", keyed, named, "--format", "json", "--spec-file", spec_file, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [g["gpu"] for g in report["gpus"]] == ["mygpu"] and report["across_gpus"] == []
    # Without the spec file nothing resolves the device name: two GPUs, each as written.
    plain = json.loads(rooflint("report", keyed, named, "--format", "json", cwd=tmp_path).stdout)
    assert [g["gpu"] for g in plain["gpus"]] == ["ACME MyChip 9000", "mygpu"]


@pytest.mark.parametrize("name", H100_NAMES)
def test_compare_joins_rows_whichever_way_the_gpu_is_written(tmp_path, name):
    base = write(run("h100_sxm"), tmp_path / "base")
    new = write(run(name, scale=1.5), tmp_path / "new")  # both triton rows 50% slower
    done = rooflint("compare", base, new, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 slower, 2 same" in done.stdout and "GPUs differ" not in done.stdout
    assert "| h100_sxm |" in done.stdout


def _spec_file(tmp_path):
    path = tmp_path / "gpus.toml"
    path.write_text(SPEC_FILE)
    return path
