"""cross_entropy: the library peers (Liger-Kernel, quack), forward and backward through autograd:
their cross-entropy on logits, and their fused-linear forms on hidden states and the head."""

from __future__ import annotations

from functools import partial

from rooflint.core.errors import VariantSkipped
from rooflint.kernels.common.libraries import (
    LIGER,
    QUACK,
    overwriting,
    require_whole_vector_rows,
    require_whole_vectors,
)
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


# quack's default: the rows of one chunk of the fused-linear loss.
QUACK_CHUNK = 4096
# Its scaled-exp pipeline (Hopper, bf16) pads a ragged last chunk to a whole number of 128-row tiles.
QUACK_TILE_M = 128


def quack_chunk_rows(tokens: int) -> set[int]:
    """The row counts of quack's fused-linear chunks at ``tokens`` (the last one padded to 128)."""
    full, rest = divmod(tokens, QUACK_CHUNK)
    rows = {QUACK_CHUNK} if full else set()
    if rest:
        rows.add(-(-rest // QUACK_TILE_M) * QUACK_TILE_M)
    return rows


@FAMILY.variant("quack", library=QUACK)
def quack(case):
    """quack: cross_entropy (CuTe DSL, mean reduction), chunked_linear_cross_entropy"""
    target = case["target"]
    if case.params["hidden"]:
        if case.dtype_name == "fp32":
            raise VariantSkipped("quack's fused-linear GEMMs take fp16 and bf16 inputs")
        x, weight = case["x"], case["weight"]
        # Each chunk's logits are quack's own rows: a vocabulary that is no whole number of 16-byte
        # vectors fails to compile inside the CuTe DSL (its cp.async copies take 4, 8 or 16 bytes).
        require_whole_vector_rows(QUACK, weight.shape[0], weight.dtype, weight.element_size())
        module = QUACK.load("linear_cross_entropy")
        fused = QUACK.attribute(module, "chunked_linear_cross_entropy")
        supported = getattr(module, "scaled_exp_lce_supported", None)
        scaled = supported is not None and supported(x, weight, QUACK_CHUNK, "mean")
        options = {}
        if scaled and x.shape[1] in quack_chunk_rows(x.shape[0]):
            # quack 0.6.5's scaled-exp pipeline (what it picks on Hopper in bf16) cannot tell whether
            # an epilogue vector runs along the rows or the columns of its dx GEMM when a chunk's rows
            # equal the hidden size ("m == n makes row/col inference ambiguous": 8192 tokens of
            # Llama-3-8B's 4096). Its base pipeline, which quack's own use_scaled_exp=False picks,
            # runs that shape: the row times what a user of quack can run there.
            options = {"use_scaled_exp": False}
            scaled = False
        if not scaled and x.shape[0] % 8:
            raise VariantSkipped(
                f"quack's chunked fused-linear loss takes a multiple of 8 tokens (its TMA GEMMs' rows): "
                f"{x.shape[0]} is not"
            )
        tensors = leaves(case)
        return lambda: with_grads(partial(fused, **options), tensors, target)
    loss = QUACK.function("cross_entropy", "cross_entropy")
    require_whole_vectors(QUACK, case["logits"])
    return lambda: with_grads(loss, leaves(case), target)
