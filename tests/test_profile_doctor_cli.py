"""`rooflint profile` and `bench --junit`, run as a user runs them: a variant that fails its float64
check or raises is reported as failed and never profiled (exit 1); one that cannot run here is a
skipped row; a family without bf16 profiles in its own dtype; the JUnit XML parses whatever an error
message holds."""

from __future__ import annotations

import csv
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import cpu_ceilings
import pytest
from console_script import ROOFLINT, assert_refused, needs_console_script

FIXTURES = Path(__file__).parent / "fixtures"

pytestmark = [needs_console_script, pytest.mark.xdist_group("cli_profile")]


def _rooflint(
    *arguments: str, modules: str = "toy_family", path: Path | None = None, cache: Path | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "ROOFLINT_FAMILY_MODULES": modules, "COLUMNS": "200"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path or ""), str(FIXTURES), os.environ.get("PYTHONPATH")]))
    if cache is not None:  # a bench's own cache, holding the CPU's ceilings measured once per test process
        env["ROOFLINT_CACHE"] = str(cache)
        cpu_ceilings.seed(cache)
    return subprocess.run([ROOFLINT, *arguments], capture_output=True, text=True, env=env, timeout=300)


def _kernels(folder: Path) -> list[dict[str, str]]:
    with (folder / "kernels.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_failed_or_raising_variant_is_a_failed_row_never_profiled(tmp_path):
    done = _rooflint(
        "profile", "toy", "-V", "eager,wrong,raises", "--dtype", "fp32", "--device", "cpu", "--out", str(tmp_path)
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "wrong, raises" in done.stderr  # named as failed, on the error stream
    rows = _kernels(tmp_path)
    by_variant = {}
    for row in rows:
        by_variant.setdefault(row["variant"], []).append(row)
    assert [r["status"] for r in by_variant["eager"]] == ["ok"] and by_variant["eager"][0]["kernel"] == "aten::mul"
    [wrong] = by_variant["wrong"]  # one row saying why, no kernel list of a wrong answer
    assert (wrong["status"], wrong["kernel"]) == ("failed", "") and "exceeds tolerance" in wrong["message"]
    [raises] = by_variant["raises"]  # a build that raises is a row; the variants around it are kept
    assert raises["status"] == "error" and "planted build failure" in raises["message"]


def test_a_family_without_bf16_profiles_in_its_own_dtype(tmp_path):
    done = _rooflint("profile", "toy", "-V", "eager", "--device", "cpu", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "toy fp32 small" in done.stdout


def test_a_variant_that_cannot_run_here_is_a_skipped_row(tmp_path):
    arguments = ("profile", "vector_add", "-V", "eager,triton", "--size", "n=1024", "--dtype", "fp32")
    done = _rooflint(*arguments, "--device", "cpu", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    statuses = [(r["variant"], r["status"], r["message"]) for r in _kernels(tmp_path)]
    assert statuses == [("eager", "ok", ""), ("triton", "skipped", "needs a CUDA GPU")]


def test_a_kernel_list_that_cannot_be_written_is_refused_before_profiling(tmp_path):
    (tmp_path / "kernels.csv").mkdir()
    done = _rooflint("profile", "toy", "-V", "eager", "--dtype", "fp32", "--device", "cpu", "--out", str(tmp_path))
    assert_refused(done, "kernels.csv", "directory")
    assert not done.stdout.strip()  # no table: nothing ran


CONTROL_FAMILY = '''
from toy_family import cost, make_inputs, reference
from rooflint.core.family import Family

FAMILY = Family("controls", summary="y = 2x", sizes={"small": [{"n": 256}], "large": [{"n": 512}]},
                make_inputs=make_inputs, reference=reference, cost=cost, dtypes=("fp32",))


@FAMILY.variant("eager", baseline=True)
def eager(case):
    """correct"""
    x = case["x"]
    return lambda: x * 2


@FAMILY.variant('odd<&"name', kind="compile")
def odd(case):
    """raises with a compiler's coloured message"""
    raise RuntimeError("\\x1b[31mcompile failed\\x1b[0m <at> & here")
'''


def test_junit_parses_when_a_message_holds_control_characters(tmp_path):
    (tmp_path / "controls_family.py").write_text(CONTROL_FAMILY)
    junit = tmp_path / "junit.xml"
    arguments = ("bench", "controls", "--device", "cpu", "--size", "small", "--no-plots")
    done = _rooflint(*arguments, "--out", str(tmp_path / "out"), "--junit", str(junit),
                     modules="controls_family", path=tmp_path, cache=tmp_path / "cache")  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    cases = {case.get("name"): case for case in ET.parse(junit).getroot().iter("testcase")}
    assert set(cases) == {"eager[fp32,n=256]", 'odd<&"name[fp32,n=256]'}
    [error] = cases['odd<&"name[fp32,n=256]']
    assert error.tag == "error" and "compile failed" in error.get("message") and "<at> & here" in error.get("message")
