"""Build a family's .cu source with nvcc on first use, cache it, and launch it through ctypes.

The .cu files are plain CUDA C++ with ``extern "C"`` launchers, not torch extensions: they
compile in seconds, build in CI without CUDA-enabled torch headers, and take raw device
pointers plus the caller's stream, so they run on torch's current stream like any torch op.

Calling convention for every exported launcher (checked by the ctypes wrapper below):
``extern "C" int rooflint_<name>(<pointers as void*/T*>, <integers as long long>,
<reals as float>, cudaStream_t stream)`` returning the cudaError_t of the launch.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rooflint.core import paths
from rooflint.core.errors import VariantSkipped

# Warnings are errors so that a narrowing conversion or an unused result fails CI, not a run.
WARNING_FLAGS = ("-std=c++17", "--Werror", "all-warnings", "-Xcompiler", "-Wall,-Werror,-fPIC")
NVCC_FLAGS = ("-O3", "-lineinfo", *WARNING_FLAGS)
# A check that a source compiles (CI, 2 cores, four targets): the same language and warning flags with the
# optimizers off. Syntax, types, narrowing and every arch guard are decided before optimization, and the
# optimizing passes (NVVM's and ptxas's) are 70% of a build: decode_attention.cu's 34 kernels take
# 155 s at -O3 and 46 s so. A build that runs (sm_90a on the GPU machine) keeps -O3 and the same warnings.
CHECK_FLAGS = ("-O0", "-Xcicc", "-O0", "-Xptxas", "-O0", *WARNING_FLAGS)


def nvcc_path() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").exists():
            return str(Path(home) / "bin" / "nvcc")
    return None


def include_dir() -> Path:
    """rooflint's CUDA headers (``#include "rooflint/common.cuh"``), shipped in the wheel; plugins use them too."""
    return Path(__file__).resolve().parent.parent / "kernels" / "include"


def gencode(arch: str | tuple[str, ...]) -> list[str]:
    """nvcc target flags for one arch or several. 'sm_90a' (wgmma, setmaxnreg) needs the -gencode form on nvcc 13.0."""
    archs = (arch,) if isinstance(arch, str) else arch
    numbers = [a.removeprefix("sm_") for a in archs]
    return [f"-gencode=arch=compute_{n},code=sm_{n}" for n in numbers]


Defines = tuple[tuple[str, int], ...]  # -D NAME=VALUE pairs: a source's compile-time meta-parameters


def compile_command(
    source: Path,
    output: Path,
    arch: str | tuple[str, ...],
    *,
    shared: bool = True,
    check_only: bool = False,
    defines: Defines = (),
) -> list[str]:
    nvcc = nvcc_path()
    if nvcc is None:
        raise VariantSkipped("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    kind = ["-shared"] if shared else ["-c"]
    includes = ["-I", str(source.parent), "-I", str(include_dir())]
    flags = CHECK_FLAGS if check_only else NVCC_FLAGS
    macros = [f"-D{name}={value}" for name, value in defines]
    return [nvcc, *flags, *macros, *gencode(arch), *kind, *includes, str(source), "-o", str(output)]


def compile_source(source: Path, output: Path, arch: str | tuple[str, ...], **options: Any) -> None:
    """Compile or raise VariantSkipped carrying nvcc's first error lines; ``options`` are
    compile_command's (shared, check_only, defines)."""
    command = compile_command(source, output, arch, **options)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if "error" in line] or lines
        raise VariantSkipped(f"nvcc failed for {source.name} ({arch}): " + " | ".join(errors[:3]))


def device_arch() -> str:
    import torch

    return arch_name(*torch.cuda.get_device_capability())


def arch_name(major: int, minor: int) -> str:
    """The nvcc target for a compute capability, as torch or NVML reads it."""
    # Hopper's own instructions (wgmma) exist only in the arch-specific sm_90a target.
    return f"sm_{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")


class CudaLibrary:
    """A compiled .cu source; ``lib.launch("rooflint_x", tensor, n, 1.0)`` runs on torch's current stream."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lib = ctypes.CDLL(str(path))

    def launch(self, function: str, *args: Any) -> None:
        import torch

        converted = [_to_ctypes(arg) for arg in args]
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        entry = getattr(self._lib, function)
        entry.restype = ctypes.c_int
        code = entry(*converted, stream)
        if code != 0:
            raise RuntimeError(f"{function} failed: CUDA error {code} ({_error_string(code)})")

    def query(self, function: str, *args: Any) -> int:
        """A host-side question to the library (no stream, no launch): its non-negative answer, or
        RuntimeError where it returns minus a CUDA error code."""
        entry = getattr(self._lib, function)
        entry.restype = ctypes.c_int
        answer = entry(*[_to_ctypes(arg) for arg in args])
        if answer < 0:
            raise RuntimeError(f"{function} failed: CUDA error {-answer} ({_error_string(-answer)})")
        return answer


def _to_ctypes(arg: Any) -> Any:
    import torch

    if isinstance(arg, torch.Tensor):
        if not arg.is_cuda:
            raise ValueError("CUDA launchers take CUDA tensors")
        return ctypes.c_void_p(arg.data_ptr())
    if arg is None:  # an optional operand left out: a null pointer
        return ctypes.c_void_p(None)
    if isinstance(arg, bool):
        return ctypes.c_longlong(int(arg))
    if isinstance(arg, int):
        return ctypes.c_longlong(arg)
    if isinstance(arg, float):
        return ctypes.c_float(arg)
    raise TypeError(f"cannot pass {type(arg).__name__} to a CUDA launcher")


def _error_string(code: int) -> str:
    try:
        import torch

        return torch.cuda.cudart().cudaGetErrorString(code)
    except Exception:  # the name is a courtesy; the code is what matters
        return "see cudaError_t"


@functools.cache
def load(source: Path | str, arch: str | None = None, defines: Defines = ()) -> CudaLibrary:
    """Compile ``source`` for this GPU (cached by source hash, arch, flags and ``defines``, the -D
    meta-parameters a variant's config sets) and load it."""
    import torch

    if not torch.cuda.is_available():
        raise VariantSkipped("needs a CUDA GPU")
    library, _ = build(Path(source), arch or device_arch(), defines)
    return CudaLibrary(library)


def library_path(source: Path, arch: str, defines: Defines = ()) -> Path:
    """Where the build of ``source`` for ``arch`` is cached: keyed by the source, every header it
    may include, the arch, the flags and the defines, so a change to any of them builds anew."""
    digest = hashlib.sha256()
    for header in sorted(source.parent.glob("*.cuh")) + sorted(include_dir().rglob("*.cuh")):
        digest.update(header.read_bytes())
    digest.update(source.read_bytes())
    digest.update(" ".join((arch, *NVCC_FLAGS)).encode())
    if defines:  # none: the key every build had before defines existed
        digest.update(" ".join(f"-D{name}={value}" for name, value in defines).encode())
    return paths.cache_dir("cuda") / f"{source.stem}-{arch}-{digest.hexdigest()[:16]}.so"


class BuildTally(threading.local):
    """What this thread's builds cost: libraries it compiled itself, and the seconds it spent in
    ``build`` compiling or waiting for another process's (or thread's) compile of the same library.
    The worker reports those seconds as "build" apart from the rest of a variant's first calls; a
    thread's own, so builds run ahead on other threads are never counted as its wait."""

    def __init__(self) -> None:
        self.built = 0
        self.seconds = 0.0


BUILDS = BuildTally()


def build(source: Path, arch: str, defines: Defines = ()) -> tuple[Path, bool]:
    """The cached library for ``source`` and ``arch``, compiled first where it is not there yet;
    and whether this call compiled it.

    One compile per library, however many ask: a lock file beside the library makes a second
    process (bench's builds ahead, a fleet's other workers) wait for the first one's compile and
    then load its result, rather than run nvcc for the same output again.
    """
    target = library_path(source, arch, defines)
    if target.exists():
        return target, False
    began, compiled = time.perf_counter(), False
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with _locked(target.with_suffix(".lock")):
            if not target.exists():
                partial = target.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
                compile_source(source, partial, arch, defines=defines)
                partial.replace(target)  # atomic: no process ever loads a half-written library
                compiled = True
    finally:
        BUILDS.seconds += time.perf_counter() - began
        BUILDS.built += compiled
    return target, compiled


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock between processes (flock), also between threads: each opens its own file."""
    with path.open("a") as handle:
        try:
            import fcntl
        except ImportError:  # no flock (Windows): two builds of one library may both run; each is atomic
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def family_source(module_file: str, name: str | None = None) -> Path:
    """The .cu beside a family module: ``family_source(__file__)`` -> <family>.cu beside <family>.py,
    or <family>/<family>.cu from a family package's ``__init__.py``; ``name`` picks another source
    in the same folder (``family_source(__file__, "softmax")`` from softmax/cuda.py)."""
    path = Path(module_file)
    stem = path.parent.name if path.stem == "__init__" else path.stem
    return path.with_name(f"{name or stem}.cu")
