"""Zero-edit families, proved end to end: a third-party distribution installed into a fresh venv.

tests/fixtures/plugin_dist is a separate distribution ("tiny-plugin") whose only link to rooflint is
the entry point ``tiny_scale = "tiny_plugin.scale"`` in the ``rooflint.families`` group, and a CUDA
source that includes ``rooflint/common.cuh``. rooflint (non-editable, from a copy of this checkout)
and the plugin are pip-installed into a temporary venv; that venv's console script must then list
the family and bench it on CPU, and nvcc, where there is one, must compile the plugin's .cu with the
include path rooflint gives it, from the header that shipped inside the installed package.

torch and the other dependencies come from the interpreter running the tests (a .pth file adds its
site-packages to the venv): installing torch again would take minutes. Deselect with -m "not plugin".
"""

import csv
import importlib.util
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
import warnings
from pathlib import Path

import cpu_ceilings
import pytest

from rooflint.engine.cuda_build import nvcc_path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = Path(__file__).parent / "fixtures" / "plugin_dist"

pytestmark = pytest.mark.plugin


def offline_build_flags() -> list[str]:
    """Build offline where this interpreter can build wheels itself (setuptools >= 70.1 carries
    bdist_wheel); otherwise let pip fetch the build backend into an isolated env, as it normally does."""
    has_setuptools = importlib.util.find_spec("setuptools") is not None
    if has_setuptools and (
        importlib.util.find_spec("setuptools.command.bdist_wheel") or importlib.util.find_spec("wheel")
    ):
        return ["--no-build-isolation", "--no-index"]
    return []


def make_venv(where: Path) -> Path:
    """A venv without pip of its own that sees this interpreter's packages (torch, typer, ...)."""
    venv.create(where, with_pip=False)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # addsitedir, not a bare path: it also runs the .pth files there (an editable install's path).
    outer = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    lines = "; ".join(f"site.addsitedir({path!r})" for path in dict.fromkeys(outer))
    (Path(purelib) / "zz_outer_site.pth").write_text(f"import site; {lines}\n")
    return python


def copy_rooflint(where: Path) -> Path:
    """The checkout's sources, so building the wheel writes nothing into the checkout."""
    shutil.copytree(ROOT / "src", where / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, where / name)
    return where


def run(command, cwd, **kwargs):
    result = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result


def test_installed_plugin_is_listed_benched_and_builds_against_rooflints_header(tmp_path):
    python = make_venv(tmp_path / "venv")
    plugin = tmp_path / "plugin"
    shutil.copytree(PLUGIN, plugin, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    env = {k: v for k, v in os.environ.items() if k not in ("ROOFLINT_FAMILY_MODULES", "PYTHONPATH")}
    install = [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", *offline_build_flags()]
    run([*install, copy_rooflint(tmp_path / "rooflint"), plugin], cwd=tmp_path, env=env)

    # The .cu compiles while the CPU bench runs: with the venv's rooflint, so the include dir is the
    # header that shipped in the installed package, not this checkout's.
    compile_check = None
    if nvcc_path() is not None:
        script = (
            "import sys, pathlib, subprocess, rooflint.engine.cuda_build as cb, tiny_plugin.scale as s\n"
            "assert pathlib.Path(sys.prefix) in cb.include_dir().parents, cb.include_dir()\n"
            "source = cb.family_source(s.__file__)\n"
            "command = cb.compile_command(source, pathlib.Path(sys.argv[1]), 'sm_80', shared=False)\n"
            "sys.exit(subprocess.run(command).returncode)\n"
        )
        compile_check = subprocess.Popen(
            [str(python), "-c", script, str(tmp_path / "scale.o")],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    listed = run([python.parent / "rooflint", "list"], cwd=tmp_path, env=env).stdout
    assert "tiny_scale" in listed and "torch.mul" in listed and "import failed" not in listed

    # The console entry point, with the CPU's ceilings this test process measured in its cache
    # (tests/cpu_ceilings.py), or else measured with a small matmul: the default 1024^3 bf16 GEMM costs
    # ~25 s on a 2-core runner, and neither says anything about plugins.
    cache = tmp_path / "cache"
    seeded = cpu_ceilings.seed(cache)
    bench = (
        "import sys\n"
        "from rooflint.engine.ceilings import measure_cpu_ceilings\n"
        f"{'pass' if seeded else 'measure_cpu_ceilings(matmul_n=128)'}\n"
        "from rooflint.cli import main\n"
        "sys.argv = ['rooflint', *sys.argv[1:]]\n"
        "main()\n"
    )
    out = tmp_path / "out"
    args = ["bench", "tiny_scale", "--device", "cpu", "--size", "small", "--dtype", "fp32", "--out", out, "--no-plots"]
    run([python, "-c", bench, *args], cwd=tmp_path, env=dict(env, ROOFLINT_CACHE=str(cache)), timeout=300)
    with open(out / "results.csv", newline="") as handle:
        rows = {row["variant"]: row for row in csv.DictReader(handle)}
    assert rows["eager"]["status"] == "ok" and float(rows["eager"]["rel_error"]) <= float(rows["eager"]["tolerance"])
    assert float(rows["eager"]["speedup_vs_eager"]) == 1.0  # the plugin's declared baseline
    assert rows["cuda"]["status"] == "skipped" and rows["cuda"]["message"] == "needs a CUDA GPU"

    if compile_check is None:
        warnings.warn("nvcc not found: the plugin's .cu was not compiled", stacklevel=1)
        return
    output, _ = compile_check.communicate(timeout=300)
    assert compile_check.returncode == 0, output
    assert (tmp_path / "scale.o").stat().st_size > 0
