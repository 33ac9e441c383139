"""The wheel installs only the rooflint package, with every CUDA source and the GPU table inside."""

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_claims_only_rooflint_and_carries_its_data(tmp_path):
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", *isolation, "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("rooflint-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names}
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"rooflint"}
    for source in (ROOT / "kernels").glob("*.cu*"):
        assert f"rooflint/kernels/{source.name}" in names
    for module in (ROOT / "kernels").glob("*.py"):
        assert f"rooflint/kernels/{module.name}" in names
    assert "rooflint/hardware_specs/gpus.toml" in names
