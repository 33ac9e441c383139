"""Every CUDA source compiled for Turing, Ampere and Hopper with warnings as errors, and a record of
which passed, so that a check already made for the same inputs is not made twice.

tests/test_cuda_sources.py checks each source through ``check``. CI (.ci/run) also runs this file
as a script while pip installs the test dependencies: nvcc needs neither torch nor the virtualenv,
and the install leaves a core idle, so by the time pytest runs, most sources are already checked.
A pass is recorded under ``$ROOFLINT_NVCC_CHECK_CACHE`` keyed by everything that decides the result:
nvcc's version, the flags and targets, and the bytes of the source and of every header it includes.
A failure is never recorded: the test compiles again and reports nvcc's own errors.

    PYTHONPATH=src ROOFLINT_NVCC_CHECK_CACHE=/tmp/nvcc-checks python3 tests/nvcc_checks.py
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rooflint.engine.cuda_build import CHECK_FLAGS, compile_command, compile_source, include_dir, nvcc_path

ARCHS = ("sm_75", "sm_80", "sm_90", "sm_90a")
# Code reaches sm_90a's own instructions (wgmma, setmaxnreg) only under these macros. A source that
# names none of them, itself or in a rooflint header it includes, is the same program for sm_90a as
# for sm_90: cicc emits the same PTX but for its .target line, and ptxas accepts for sm_90a all that it
# accepts for sm_90. Its sm_90a build would check nothing the sm_90 build does not, at a fifth of its time.
ARCH_SPECIFIC = re.compile(r"__CUDA_ARCH_(FEAT_SM\d+_ALL|SPECIFIC|FAMILY_SPECIFIC)")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
CACHE_ENV = "ROOFLINT_NVCC_CHECK_CACHE"
# Sources whose optimized build a test reads ptxas's -v report of (spills, serialized wgmma), and the
# target: built ahead too, and recorded as ptxas_report says.
REPORTED = (("attention_hopper.cu", "sm_90a"),)


def sources(kernels: Path) -> list[Path]:
    """Beside each family module (kernels/<family>/<family>.cu and its other sources)."""
    return sorted(kernels.rglob("*.cu"))


def with_headers(source: Path) -> list[Path]:
    """The source and every quoted header it includes, directly or through another, found where nvcc looks."""
    found, pending = [], [source]
    while pending:
        path = pending.pop()
        if path in found:
            continue
        found.append(path)
        for name in INCLUDE.findall(path.read_text()):
            pending += [
                folder / name for folder in (path.parent, source.parent, include_dir()) if (folder / name).exists()
            ][:1]
    return found


def archs(source: Path) -> tuple[str, ...]:
    if any(ARCH_SPECIFIC.search(path.read_text()) for path in with_headers(source)):
        return ARCHS
    return tuple(arch for arch in ARCHS if arch != "sm_90a")


@functools.cache
def _nvcc_version() -> str:
    return subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True).stdout


def check_key(source: Path, targets: tuple[str, ...]) -> str:
    """What decides whether ``source`` compiles clean for ``targets``: nvcc, its flags, and the text
    of the source and its headers (by name and content, wherever the package is installed)."""
    digest = hashlib.sha256()
    digest.update(_nvcc_version().encode())
    digest.update(" ".join((*CHECK_FLAGS, *targets)).encode())
    for path in with_headers(source):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def check(source: Path, scratch: Path) -> None:
    """Compile ``source`` for every target (one nvcc call: the host side compiles once, the time goes
    to the device passes; optimizers off, as the -O3 build is made and run on the GPU machine), or
    find that it already passed with these exact inputs. Raises VariantSkipped with nvcc's errors."""
    cache, targets = os.environ.get(CACHE_ENV), archs(source)
    passed = Path(cache) / f"{source.stem}-{check_key(source, targets)[:24]}.ok" if cache else None
    if passed is not None and passed.is_file():
        return
    compile_source(source, scratch / f"{source.stem}.o", targets, shared=False, check_only=True)
    if passed is not None:
        passed.parent.mkdir(parents=True, exist_ok=True)
        passed.write_text(f"{source.name}: {' '.join(targets)}\n")


def ptxas_report(source: Path, arch: str, scratch: Path) -> subprocess.CompletedProcess:
    """rooflint's own build of ``source`` for ``arch`` (compile_command, as a kernel is built) with
    ptxas's -v report (each kernel's registers and spills, a wgmma it serialized), or that build's
    record where it was made with these exact inputs: nvcc, the whole command but for the output's
    path, and the bytes of the source and its headers. A failed build is never recorded."""
    command = [*compile_command(source, scratch / f"{source.stem}.o", arch, shared=False), "-Xptxas", "-v"]
    cache = os.environ.get(CACHE_ENV)
    recorded = None
    if cache:
        digest = hashlib.sha256(_nvcc_version().encode())
        output = command.index("-o") + 1
        digest.update("\0".join(command[1:output] + command[output + 1 :]).encode())
        for path in with_headers(source):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        recorded = Path(cache) / f"{source.stem}-{arch}-{digest.hexdigest()[:24]}.ptxas.json"
        if recorded.is_file():
            report = json.loads(recorded.read_text())
            return subprocess.CompletedProcess(command, 0, report["stdout"], report["stderr"])
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if recorded is not None and done.returncode == 0:
        recorded.parent.mkdir(parents=True, exist_ok=True)
        partial = recorded.with_suffix(".partial")  # renamed whole: a test never reads half a record
        partial.write_text(json.dumps({"stdout": done.stdout, "stderr": done.stderr}))
        partial.replace(recorded)
    return done


def main() -> int:
    """Check every source on two threads (each waits on its nvcc); report, never fail: the test does."""
    if nvcc_path() is None or not os.environ.get(CACHE_ENV):
        print(f"nvcc checks ahead: skipped (no nvcc, or {CACHE_ENV} unset)")
        return 0
    kernels = Path(__file__).resolve().parents[1] / "src" / "rooflint" / "kernels"

    def one(source: Path) -> str:
        with tempfile.TemporaryDirectory() as scratch:
            try:
                check(source, Path(scratch))
                return f"{source.name}: ok"
            except Exception as error:  # noqa: BLE001 - the test reports it; here it is one line
                return f"{source.name}: FAILED ({str(error)[:200]})"

    def report(job: tuple[str, str]) -> str:
        name, arch = job
        (source,) = (path for path in sources(kernels) if path.name == name)
        with tempfile.TemporaryDirectory() as scratch:
            done = ptxas_report(source, arch, Path(scratch))
        return f"{name} ({arch}, ptxas report): {'ok' if done.returncode == 0 else 'FAILED'}"

    with ThreadPoolExecutor(max_workers=2) as pool:
        # the optimized builds queued first: the longest jobs, so neither thread ends with one alone
        reports, checks = pool.map(report, REPORTED), pool.map(one, sources(kernels))
        for line in [*reports, *checks]:
            print(f"nvcc checks ahead: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
