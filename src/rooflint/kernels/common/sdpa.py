"""F.scaled_dot_product_attention pinned to one backend: one variant per built-in path PyTorch offers.

SDPA's dispatcher picks one backend (flash, cuDNN, memory-efficient or math) per call, and the one it
picks is not always the fastest here; so attention and decode_attention also time each backend on its
own, and the strongest of them is the peer a hand-written kernel is judged against. Not a family (the
leading underscore keeps the registry from listing it).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from rooflint.core.errors import VariantSkipped

# variant name -> SDPBackend member. Math is the reference path (the scores materialised, in fp32 for
# fp16/bf16 inputs); it runs anywhere, so it needs no GPU.
BACKENDS = {
    "sdpa_flash": "FLASH_ATTENTION",
    "sdpa_cudnn": "CUDNN_ATTENTION",
    "sdpa_efficient": "EFFICIENT_ATTENTION",
    "sdpa_math": "MATH",
}

# How PyTorch says that no enabled backend takes the inputs (the CUDA and the CPU dispatcher's words).
_UNSUPPORTED = ("No available kernel", "No viable backend")


def pinned(backend: str, call: Callable[[Any], Callable[[], Any]]) -> Callable[[Any], Callable[[], Any]]:
    """A variant builder running ``call(case)`` (SDPA with the family's arguments) under one backend.

    Building probes one call: a backend that does not take these inputs on this GPU (a head dim, a
    dtype, GQA, an architecture it lacks) becomes a skipped row with PyTorch's reason, not an error.
    """
    label = backend.lower()

    def build(case):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        attend = call(case)
        choice = getattr(SDPBackend, backend)

        def run():
            with sdpa_kernel(choice):
                return attend()

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                run()
            except RuntimeError as error:
                if not str(error).startswith(_UNSUPPORTED):
                    raise
                # PyTorch states why in warnings, one per check that failed; the error itself says little.
                reasons = [str(w.message).split("(Triggered internally")[0].strip() for w in caught]
                why = "; ".join(r for r in reasons if r) or str(error).splitlines()[0]
                raise VariantSkipped(f"SDPA's {label} backend does not take these inputs: {why}") from None
        run.backend = label
        run.note = f"SDPA backend: {label} (pinned)"  # bench shows a variant's note in its row's message
        return run

    build.__doc__ = f"F.scaled_dot_product_attention pinned to {label} (sdpa_kernel)"
    return build
