"""cross_entropy: the library peers (Liger-Kernel, quack), forward and backward through autograd:
their cross-entropy on logits, and their fused-linear forms on hidden states and the head."""

from __future__ import annotations

from rooflint.core.errors import VariantSkipped
from rooflint.kernels.common.libraries import LIGER, QUACK, overwriting, require_whole_vectors
from rooflint.kernels.cross_entropy import FAMILY, leaves, with_grads


@FAMILY.variant("liger", library=LIGER)
def liger(case):
    """Liger-Kernel: liger_cross_entropy (gradient written over the logits), liger_fused_linear_cross_entropy"""
    target = case["target"]
    if case.params["hidden"]:
        fused = LIGER.function("transformers.functional", "liger_fused_linear_cross_entropy")
        tensors = leaves(case)
        return lambda: with_grads(fused, tensors, target)
    loss = LIGER.function("transformers.functional", "liger_cross_entropy")
    # Its forward writes the gradient over its input, the memory it saves: it gets copies of the
    # logits, never the tensor the other variants share (libraries.overwriting).
    logits = case["logits"]
    return overwriting(lambda z: with_grads(loss, (z,), target), lambda: (logits.clone(),))


@FAMILY.variant("quack", library=QUACK)
def quack(case):
    """quack: cross_entropy (CuTe DSL, mean reduction), chunked_linear_cross_entropy"""
    target = case["target"]
    if case.params["hidden"]:
        if case.dtype_name == "fp32":
            raise VariantSkipped("quack's fused-linear GEMMs take fp16 and bf16 inputs")
        fused = QUACK.function("linear_cross_entropy", "chunked_linear_cross_entropy")
        tensors = leaves(case)
        return lambda: with_grads(fused, tensors, target)
    loss = QUACK.function("cross_entropy", "cross_entropy")
    require_whole_vectors(QUACK, case["logits"])
    return lambda: with_grads(loss, leaves(case), target)
