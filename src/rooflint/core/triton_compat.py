"""``triton`` and ``tl`` for family modules, so a family imports on a machine without Triton.

Without the triton package, ``triton`` and ``tl`` are stand-ins: decorating a kernel with
``@triton.jit`` or ``@triton.autotune(...)`` still works at import time, and only *calling* such a
kernel raises VariantSkipped. A variant that declares ``needs=(NEEDS_TRITON,)`` is reported skipped
with the reason before it is ever built, so the stand-in is never reached in a bench.

Family modules (and plugins) write ``from rooflint.core.triton_compat import tl, triton``.
"""

from __future__ import annotations

import os
from typing import Any

from rooflint.core.errors import VariantSkipped

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - exercised by the no-triton test in a subprocess
    HAS_TRITON = False

    class _Missing:
        """Absorbs attribute access, calls and decoration at import time; fails only when run."""

        def __init__(self, name: str) -> None:
            self._name = name

        def __getattr__(self, attribute: str) -> _Missing:
            return _Missing(f"{self._name}.{attribute}")

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            # Used as a bare decorator (@triton.jit): keep a placeholder kernel in the function's place.
            if len(args) == 1 and callable(args[0]) and not kwargs and not isinstance(args[0], _Missing):
                return _Missing(f"{self._name}({getattr(args[0], '__name__', 'kernel')})")
            if self._name.endswith(("cdiv", "next_power_of_2")):
                raise VariantSkipped("needs the triton package")
            return _Missing(f"{self._name}(...)")

        def __getitem__(self, grid: Any) -> Any:  # kernel[grid](...): the launch is where it fails
            def launch(*_args: Any, **_kwargs: Any) -> Any:
                raise VariantSkipped("needs the triton package")

            return launch

    triton = _Missing("triton")  # type: ignore[assignment]
    tl = _Missing("triton.language")  # type: ignore[assignment]


# Programmatic dependent launch's device half (sm_90+; Triton >= 3.4). Kernels call these only under
# a PDL constexpr that is False off Hopper and in the interpreter, which lacks them.
try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # pragma: no cover - older Triton, or none
    gdc_launch_dependents = gdc_wait = None


def interpreting() -> bool:
    """Whether Triton kernels run in its CPU interpreter (TRITON_INTERPRET=1). The interpreter
    multiplies bf16 tl.dot operands as raw 16-bit patterns, so kernels that use tl.dot upcast their
    operands to fp32 there (exact): CPU tests still check indexing, masking and epilogues."""
    return os.environ.get("TRITON_INTERPRET") == "1"


__all__ = ["HAS_TRITON", "gdc_launch_dependents", "gdc_wait", "interpreting", "tl", "triton", "use_device_scratch"]


def _device_scratch(size: int, alignment: int, stream: int | None):
    import torch

    # The current device when the launch asks, not one captured earlier: a process that prepares
    # kernels on several GPUs gets each kernel's scratch on its own.
    return torch.empty(size, dtype=torch.int8, device=torch.device("cuda", torch.cuda.current_device()))


def use_device_scratch() -> None:
    """Give kernels that build TMA descriptors on the device (tl.make_tensor_descriptor) global memory
    for them: a few hundred bytes a launch, from torch's caching allocator. Idempotent."""
    if HAS_TRITON:
        triton.set_allocator(_device_scratch)
