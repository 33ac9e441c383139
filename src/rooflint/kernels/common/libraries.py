"""Third-party kernel libraries that families run as ``library`` variants: the peers a user deploys.

A ``Library`` answers the engine's two questions (``core.family.LibraryPeer``): can it run here, and
which version is it. It runs where its module imports and the GPU is one its kernels are built for;
otherwise the row is skipped with the reason and the line that installs it. Adapters (each family's
``library.py``) reach the library's functions through ``Library.function``, so a name missing from
an older release is a skip that says so, not an error row.
"""

from __future__ import annotations

import importlib
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType
from typing import Any

from rooflint.core.errors import VariantSkipped
from rooflint.core.paths import cache_dir

PEERS_EXTRA = "rooflint[peers]"


@dataclass(frozen=True)
class Library:
    name: str  # the distribution pip installs ("liger-kernel"): the row's library column
    module: str  # what an adapter imports ("liger_kernel")
    # The oldest GPU architecture (compute capability) its kernels are built for: CuTe DSL kernels
    # (quack, FlashAttention-4) use Hopper's TMA and wgmma; FlashAttention-2 needs Ampere's mma.
    min_capability: tuple[int, int] = (7, 5)
    # Architectures it has no kernels for at all, e.g. FlashAttention-3's Hopper-only build.
    only_capabilities: tuple[tuple[int, int], ...] = ()
    devices: tuple[str, ...] = ("cuda",)  # every peer here is a CUDA library; tests fake CPU ones
    # A compile cache on disk that the library keeps only when asked, through two environment
    # variables it reads at import: (the one that turns it on, the one that names its folder). It is
    # turned on, in a folder of rooflint's cache, unless the user set either; otherwise every process
    # compiles the library's kernels again (FlashAttention-4: ~18 s of first calls a run, warm or cold).
    disk_cache: tuple[str, str] | None = None

    def prepare(self) -> None:
        """Turn the library's disk cache on before its first import (see ``disk_cache``)."""
        if self.disk_cache is None:
            return
        enabled, folder = self.disk_cache
        if enabled not in os.environ and folder not in os.environ:
            os.environ[enabled] = "1"
            os.environ[folder] = str(cache_dir(self.module.partition(".")[0]))

    @property
    def install(self) -> str:
        return f'pip install {self.name} (or pip install "{PEERS_EXTRA}")'

    def version(self) -> str:
        """The installed distribution's version; the module's ``__version__`` where the module is
        importable without its distribution metadata (a source checkout); "" when neither."""
        try:
            return metadata.version(self.name)
        except metadata.PackageNotFoundError:
            pass
        for name in (self.module, self.module.partition(".")[0]):  # the module, then its package
            try:
                found = getattr(importlib.import_module(name), "__version__", "")
            except Exception:  # noqa: BLE001 - any import failure means no version to report
                return ""
            if found:
                return str(found)
        return ""

    def missing(self, device: str) -> str | None:
        """Why this library cannot run on ``device`` here, or None."""
        if device not in self.devices:
            return f"{self.name} needs a CUDA GPU"
        self.prepare()
        try:
            importlib.import_module(self.module)
        except ImportError as error:
            return self._not_installed(error)
        except Exception as error:  # noqa: BLE001 - a library whose import crashes cannot run here
            return f"{self.name} failed to import: {type(error).__name__}: {_first_line(error)}"
        if device == "cuda":
            return self._unsupported_gpu()
        return None

    def _unsupported_gpu(self) -> str | None:
        import torch

        capability = tuple(torch.cuda.get_device_capability())
        arch = f"sm_{capability[0]}{capability[1]}"
        if self.only_capabilities and capability not in self.only_capabilities:
            built = ", ".join(f"sm_{major}{minor}" for major, minor in self.only_capabilities)
            return f"{self.name} has kernels for {built} only; this GPU is {arch}"
        if capability < self.min_capability:
            oldest = f"sm_{self.min_capability[0]}{self.min_capability[1]}"
            return f"{self.name} needs {oldest} or newer; this GPU is {arch}"
        return None

    def load(self, submodule: str = "") -> ModuleType:
        """The library's module (or one under it); a skip with the install line where it is absent."""
        name = f"{self.module}.{submodule}" if submodule else self.module
        self.prepare()
        try:
            return importlib.import_module(name)
        except ImportError as error:
            raise VariantSkipped(self._not_installed(error)) from None

    def _not_installed(self, error: ImportError) -> str:
        return f"{self.name} is not installed ({_first_line(error)}): {self.install}"

    def function(self, submodule: str, name: str) -> Any:
        """``module.submodule.name``; a release without it is a skip naming the version, not an error."""
        return self.attribute(self.load(submodule), name)

    def attribute(self, module: ModuleType, name: str) -> Any:
        """``name`` of a module ``load`` returned; a release without it is a skip naming the version."""
        found = getattr(module, name, None)
        if found is None:
            raise VariantSkipped(
                f"{self.name} {self.version() or '(unknown version)'} has no {module.__name__}.{name}; "
                f"pip install -U {self.name}"
            )
        return found


def require_whole_vectors(library: Library, tensor: Any) -> None:
    """CuTe DSL kernels (quack) copy each row as 16-byte vectors and assert that the row is a whole
    number of them: any other row length is a shape the library does not take, so the row is skipped
    with that reason rather than reported as the library's error."""
    require_whole_vector_rows(library, tensor.shape[-1], tensor.dtype, tensor.element_size())


def require_whole_vector_rows(library: Library, elements: int, dtype: Any, element_size: int) -> None:
    """``require_whole_vectors`` for rows the library makes itself (a fused-linear loss's logits)."""
    row_bytes = elements * element_size
    if row_bytes % 16:
        raise VariantSkipped(
            f"{library.name} copies rows as 16-byte vectors: a row of {elements} {dtype} "
            f"elements ({row_bytes} bytes) is not a whole number of them"
        )


def overwriting(call: Callable[..., Any], make_arguments: Callable[[], tuple]) -> Callable[[], Any]:
    """A zero-argument call of a library function that overwrites its own arguments (FlashInfer's
    fused_add_rmsnorm, Liger's cross-entropy writing the gradient over the logits).

    The first call gets arguments of its own, never used again, so the output the float64 check
    reads stays that call's even after the engine calls again (to measure memory). Every later call
    reuses a second set: its values drift from call to call, the work and the bytes do not.
    ``call(*arguments)`` returns the output.
    """
    first, rest = make_arguments(), make_arguments()
    calls = itertools.count()
    return lambda: call(*(first if next(calls) == 0 else rest))


def _first_line(error: BaseException) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0]


# The peers rooflint runs. Compute capabilities from each project's stated requirements: Liger's Triton
# kernels run wherever Triton does; FlashInfer builds for sm_75 on; quack and FlashAttention-4 are
# CuTe DSL kernels for Hopper and Blackwell; FlashAttention-2 needs Ampere; FlashAttention-3 is
# Hopper-only.
LIGER = Library("liger-kernel", "liger_kernel", min_capability=(8, 0))
QUACK = Library("quack-kernels", "quack", min_capability=(9, 0))
FLASHINFER = Library("flashinfer-python", "flashinfer", min_capability=(7, 5))
FLASH_ATTN_4 = Library(
    "flash-attn-4",
    "flash_attn.cute",
    min_capability=(9, 0),
    disk_cache=("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED", "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"),
)
# FlashAttention-2's own module, not the flash_attn package: FlashAttention-4's wheel installs
# flash_attn/cute under the same top-level name.
FLASH_ATTN_2 = Library("flash-attn", "flash_attn.flash_attn_interface", min_capability=(8, 0))
FLASH_ATTN_3 = Library("flash-attn-3", "flash_attn_interface", only_capabilities=((9, 0),))

PEERS = (LIGER, QUACK, FLASHINFER, FLASH_ATTN_4, FLASH_ATTN_2, FLASH_ATTN_3)
