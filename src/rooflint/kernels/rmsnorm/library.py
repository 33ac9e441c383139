"""rmsnorm: the library peers (Liger-Kernel, quack, FlashInfer), each through its public forward."""

from __future__ import annotations

from rooflint.kernels.common.libraries import FLASHINFER, LIGER, QUACK, overwriting, require_whole_vectors
from rooflint.kernels.rmsnorm import EPS, FAMILY


@FAMILY.variant("liger", library=LIGER)
def liger(case):
    """Liger-Kernel's Triton RMSNorm (liger_fused_add_rms_norm with the residual)"""
    x, w, r = case["x"], case["weight"], case.inputs.get("residual")
    if r is None:
        rms_norm = LIGER.function("transformers.functional", "liger_rms_norm")
        return lambda: rms_norm(x, w, EPS)
    fused = LIGER.function("transformers.functional", "liger_fused_add_rms_norm")
    return lambda: fused(x, r, w, EPS)  # (y, h): its h is x + residual, as ours


@FAMILY.variant("quack", library=QUACK)
def quack(case):
    """quack's CuTe DSL RMSNorm (rmsnorm_fwd, the residual fused)"""
    x, w, r = case["x"], case["weight"], case.inputs.get("residual")
    forward = QUACK.function("rmsnorm", "rmsnorm_fwd")
    require_whole_vectors(QUACK, case["x"])
    if r is None:
        return lambda: forward(x, w, eps=EPS)[0]  # (out, residual_out, rstd)
    return lambda: forward(x, w, residual=r, eps=EPS)[:2]


@FAMILY.variant("flashinfer", library=FLASHINFER, dtypes=("fp16", "bf16"))
def flashinfer(case):
    """FlashInfer's CUDA RMSNorm (fused_add_rmsnorm, in place, with the residual); 16-bit only"""
    x, w, r = case["x"], case["weight"], case.inputs.get("residual")
    if r is None:
        rmsnorm = FLASHINFER.function("norm", "rmsnorm")
        return lambda: rmsnorm(x, w, eps=EPS)
    fused = FLASHINFER.function("norm", "fused_add_rmsnorm")

    def call(y, h):  # residual += x, then x = rmsnorm(residual): both arguments overwritten
        fused(y, h, w, eps=EPS)
        return y, h

    return overwriting(call, lambda: (x.clone(), r.clone()))
