"""layernorm: the library peers, Liger-Kernel's and quack's forward, each returning mean and rstd too."""

from __future__ import annotations

from rooflint.kernels.common.libraries import LIGER, QUACK, require_whole_vectors
from rooflint.kernels.layernorm import EPS, FAMILY


@FAMILY.variant("liger", library=LIGER)
def liger(case):
    """Liger-Kernel layer_norm_forward (Triton): y, and the mean and rstd it saves for backward"""
    forward = LIGER.function("ops.layer_norm", "layer_norm_forward")
    x, w, b = case["x"], case["weight"], case["bias"]

    def call():
        y, _, mean, rstd, *_ = forward(x, w, b, EPS)  # (y, x, mean, rstd, block size, warps)
        return y, mean, rstd

    return call


@FAMILY.variant("quack", library=QUACK)
def quack(case):
    """quack layernorm_fwd (CuTe DSL): y, mean and rstd; its weight and bias in fp32, as it requires"""
    forward = QUACK.function("rmsnorm", "layernorm_fwd")
    x = case["x"]
    require_whole_vectors(QUACK, case["x"])
    w, b = case["weight"].float(), case["bias"].float()

    def call():
        y, rstd, mean = forward(x, w, b, eps=EPS, return_rstd=True, return_mean=True)
        return y, mean, rstd

    return call
