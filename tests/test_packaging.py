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
    package = ROOT / "src" / "rooflint"
    shipped = [
        p for p in package.rglob("*") if p.suffix in (".py", ".cu", ".cuh", ".toml") and "__pycache__" not in p.parts
    ]
    assert len(shipped) > 60  # the walk found the package: every module, kernel source, header and spec table
    for path in shipped:
        assert f"rooflint/{path.relative_to(package).as_posix()}" in names
    assert "rooflint/kernels/include/rooflint/common.cuh" in names
    assert "rooflint/hardware_specs/gpus.toml" in names
