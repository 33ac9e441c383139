"""softmax: the library peers, Liger-Kernel's (Triton) and quack's (CuTe DSL) row softmax."""

from __future__ import annotations

from rooflint.kernels.common.libraries import LIGER, QUACK, require_whole_vectors
from rooflint.kernels.softmax import FAMILY


@FAMILY.variant("liger", library=LIGER)
def liger(case):
    """Liger-Kernel liger_softmax (Triton, one or several blocks a row)"""
    softmax = LIGER.function("transformers.functional", "liger_softmax")
    x = case["x"]
    return lambda: softmax(x)


@FAMILY.variant("quack", library=QUACK)
def quack(case):
    """quack softmax (CuTe DSL, rows split over a thread-block cluster where they are wide)"""
    softmax = QUACK.function("softmax", "softmax")
    x = case["x"]
    require_whole_vectors(QUACK, case["x"])
    return lambda: softmax(x)
