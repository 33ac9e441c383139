"""swiglu: the library peer (Liger-Kernel's SiLU-mul)."""

from __future__ import annotations

import torch

from rooflint.kernels.common.libraries import LIGER
from rooflint.kernels.swiglu import FAMILY


@FAMILY.variant("liger", library=LIGER)
def liger(case):
    """Liger-Kernel's Triton SwiGLU (liger_swiglu: silu(a) * b); for x, W as LigerSwiGLUMLP runs it,
    gate and up each from its own projection"""
    swiglu = LIGER.function("transformers.functional", "liger_swiglu")
    if not case.params["hidden"]:
        gate, up = case["gate"], case["up"]
        return lambda: swiglu(gate, up)
    x = case["x"]
    # The halves of W are row blocks, contiguous each: its gate and up projections' weights.
    w_gate, w_up = case["weight"].chunk(2, dim=0)
    return lambda: swiglu(torch.nn.functional.linear(x, w_gate), torch.nn.functional.linear(x, w_up))
