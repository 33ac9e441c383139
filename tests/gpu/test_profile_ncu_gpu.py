"""GPU tier: `rooflint profile --ncu --sass` end to end, through the console script, under the real
Nsight Compute: the counters row, and the SASS page read back into `sass.csv`."""

from __future__ import annotations

import csv
import shutil
import subprocess

import pytest
import torch

pytestmark = pytest.mark.gpu


def test_profile_ncu_sass_writes_each_variant_s_instruction_kinds(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    if shutil.which("ncu") is None:
        pytest.skip("Nsight Compute's ncu is not on PATH")
    out = tmp_path / "profile"
    done = subprocess.run(
        ["rooflint", "profile", "softmax", "-V", "triton,eager", "--ncu", "--sass", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "triton: where the warps wait" in done.stdout
    assert "eager against triton: the opcodes whose executions differ most" in done.stdout
    rows = list(csv.DictReader(open(out / "sass.csv")))
    assert {r["variant"] for r in rows} == {"triton", "eager"}
    for variant in ("triton", "eager"):
        mine = [r for r in rows if r["variant"] == variant]
        assert sum(float(r["samples_pct"]) for r in mine) == pytest.approx(100.0, abs=0.5)
        assert sum(float(r["executed"]) for r in mine) > 0
    assert list(out.glob("*-sass.csv"))  # ncu's own page, kept beside
    # The crossbar counter is asked for where ncu lists it (every GPU rooflint's tier runs on): a
    # streaming kernel's L2 bytes are at least the bytes it read, so the ratio is a number above 0.
    for row in csv.DictReader(open(out / "ncu.csv")):
        assert float(row["l2_per_sm_byte"]) > 0, row["variant"]
