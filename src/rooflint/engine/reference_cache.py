"""The float64 references on disk, so a second bench of the same shapes does not compute them again.

A reference is keyed by everything that decides its value: the family, the shape's parameters, the
dtype, the inputs' seed, the device that computed it (a GPU's float64 kernels may sum in another
order than a CPU's), the torch version, and the code of the reference and of the input generator
(their source and the source of every function and constant they reach). A change to any of them
is another key, so a stale reference is never read.

Only references that take longer to compute than to read are stored: on a GPU most take
milliseconds in float64, while reading gigabytes from disk takes seconds. A file that is missing,
partial or corrupt is a miss (and is removed), never an error; files are written to a temporary
name and renamed, so a reader never sees one half-written.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import types
from pathlib import Path
from typing import Any

import torch

from rooflint.core.paths import cache_dir

# Reading a stored reference back: torch.load from local disk, then the copy to the device. 1 GB/s
# is what a local SSD and a PCIe copy sustain together; a reference computed faster than its bytes
# read at this rate is cheaper to compute again than to store.
READ_BYTES_PER_S = 1e9
_LIBRARY_PREFIXES = ("torch", "numpy", "triton", "math", "builtins", "functools", "typing")


def code_fingerprint(*functions: Any) -> str:
    """A hash of the functions' source and of everything they reach by global name: the functions
    they call (recursively, outside torch and the standard library) and the plain constants they read."""
    digest = hashlib.sha256()
    seen: set[int] = set()
    for function in functions:
        _feed(function, digest, seen)
    return digest.hexdigest()


def _feed(function: Any, digest: Any, seen: set[int]) -> None:
    function = inspect.unwrap(function) if callable(function) else function
    if not isinstance(function, types.FunctionType) or id(function) in seen:
        return
    seen.add(id(function))
    try:
        digest.update(inspect.getsource(function).encode())
    except (OSError, TypeError):  # no source on disk (a REPL, a frozen module): its bytecode then
        digest.update(function.__code__.co_code)
    names = _global_names(function.__code__)
    scope = function.__globals__
    cells = [cell.cell_contents for cell in function.__closure__ or () if _filled(cell)]
    for name in sorted(names):
        if name in scope:
            _feed_value(name, scope[name], names, digest, seen)
    for value in cells:
        _feed_value("<closure>", value, names, digest, seen)


def _feed_value(name: str, value: Any, names: set[str], digest: Any, seen: set[int]) -> None:
    if isinstance(value, (bool, int, float, str, bytes, tuple, frozenset)):
        digest.update(f"{name}={value!r};".encode())
    elif isinstance(value, types.FunctionType) and not _is_library(value.__module__):
        _feed(value, digest, seen)
    elif isinstance(value, types.ModuleType) and not _is_library(value.__name__):
        # module.helper(...): the helpers named in the code, as found in that module
        for attribute in sorted(names):
            _feed_value(f"{value.__name__}.{attribute}", getattr(value, attribute, None), set(), digest, seen)


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):  # nested functions, lambdas, comprehensions
            names |= _global_names(constant)
    return names


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _is_library(module: str | None) -> bool:
    return not module or module.split(".")[0] in _LIBRARY_PREFIXES


def device_label(device: str) -> str:
    """The device a reference was computed on, as precisely as its float64 results can differ."""
    if device == "cuda" and torch.cuda.is_available():
        return f"cuda:{torch.cuda.get_device_name()}"
    return device


def reference_key(family: Any, params: dict[str, Any], dtype: str, seed: int, device: str) -> str:
    """The cache key of ``family``'s reference at one shape, dtype and seed, computed on ``device``."""
    parts = {
        "family": family.name,
        "params": params,
        "dtype": dtype,
        "seed": seed,
        "device": device_label(device),
        "torch": torch.__version__,
        "code": code_fingerprint(family.reference, family.make_inputs, type(family).build_case),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(nbytes(item) for item in value)
    if isinstance(value, dict):
        return sum(nbytes(item) for item in value.values())
    return 0


class ReferenceCache:
    """References stored under ``root`` (default: the user cache's ``references``), one file per key."""

    def __init__(self, root: Path | None = None, read_bytes_per_s: float = READ_BYTES_PER_S) -> None:
        self.root = Path(root) if root is not None else cache_dir("references")
        self.read_bytes_per_s = read_bytes_per_s

    def path(self, key: str) -> Path:
        return self.root / f"{key}.pt"

    def load(self, key: str, device: str) -> Any | None:
        """The stored reference on ``device``, or None when there is none or it cannot be read."""
        path = self.path(key)
        if not path.exists():
            return None
        try:
            return torch.load(path, map_location=device, weights_only=True)
        except Exception:  # noqa: BLE001 - partial, corrupt or from an unreadable format: a miss
            path.unlink(missing_ok=True)
            return None

    def worth_storing(self, value: Any, compute_s: float) -> bool:
        """Only a reference that took longer to compute than it takes to read back."""
        size = nbytes(value)
        return size > 0 and compute_s > size / self.read_bytes_per_s

    def store(self, key: str, value: Any) -> bool:
        """Write atomically; False (and nothing left behind) when the disk refuses it."""
        path = self.path(key)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(_to_cpu(value), partial)
            os.replace(partial, path)
        except OSError:  # a full or read-only disk costs the next run a recompute, never this run
            # Its cleanup too: where no file can be (ROOFLINT_CACHE naming a file, "Not a directory")
            # the unlink raised from here, and every row that stored a reference crashed.
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
            return False
        return True


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (tuple, list)):
        return type(value)(_to_cpu(item) for item in value)
    if isinstance(value, dict):
        return {name: _to_cpu(item) for name, item in value.items()}
    return value
