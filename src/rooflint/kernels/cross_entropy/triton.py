"""cross_entropy: the Triton kernel (loss and dlogits of each token in one program), and the chunked
fused-linear form built on it."""

from __future__ import annotations

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON, element_size
from rooflint.core.triton_compat import tl, triton
from rooflint.kernels.cross_entropy import FAMILY

# Vocabulary tile a program walks the row in: a row of 128256 logits (256 KB in bf16) fits no
# register file, so each pass streams it in tiles of 8192 (16 per thread at 16 warps).
MAX_TILE = 8192
# Tokens per chunk of the fused-linear form: a chunk's logits are chunk x vocab; 2^28 bytes (256 MiB,
# 1046 tokens of bf16 at 128256 words) keeps the GEMMs large enough to run at their peak.
CHUNK_BYTES = 2**28


@triton.jit
def _cross_entropy_kernel(
    logits_ptr, target_ptr, grad_ptr, loss_ptr, vocab, inv_tokens, TILE: tl.constexpr,
):  # fmt: skip
    # Pass 1 streams the row once for its log-sum-exp, the max and the sum carried tile to tile (one
    # exp a logit); pass 2 streams it again to write (softmax - onehot) / tokens. Two reads and one
    # write: the row cannot stay on chip, and the gradient needs the whole row's sum first.
    row = tl.program_id(0).to(tl.int64)
    start = row * vocab
    target = tl.load(target_ptr + row)
    running_max = float("-inf")
    total = 0.0
    for tile in range(0, vocab, TILE):
        offs = tile + tl.arange(0, TILE)
        z = tl.load(logits_ptr + start + offs, mask=offs < vocab, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(running_max, tl.max(z, axis=0))
        total = total * tl.exp(running_max - new_max) + tl.sum(tl.exp(z - new_max), axis=0)
        running_max = new_max
    lse = running_max + tl.log(total)
    picked = tl.load(logits_ptr + start + target).to(tl.float32)
    tl.store(loss_ptr + row, lse - picked)
    for tile in range(0, vocab, TILE):
        offs = tile + tl.arange(0, TILE)
        mask = offs < vocab
        # evict_first: the second read is the row's last use
        z = tl.load(logits_ptr + start + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        grad = (tl.exp(z - lse) - tl.where(offs == target, 1.0, 0.0)) * inv_tokens
        tl.store(grad_ptr + start + offs, grad.to(grad_ptr.dtype.element_ty), mask=mask)


def triton_cross_entropy(logits, target, grad, losses, *, tokens: int | None = None, max_tile: int | None = None):
    """Per-token losses into ``losses`` (fp32) and dlogits into ``grad`` (which may be ``logits``
    itself: each element is read before it is written, by the same program). ``tokens``: the count
    the mean divides by (the whole batch, when ``logits`` is one chunk of it)."""
    rows, vocab = logits.shape
    tile = min(max(triton.next_power_of_2(vocab), 32), max_tile or MAX_TILE)
    inv_tokens = 1.0 / (tokens or rows)
    _cross_entropy_kernel[(rows,)](logits, target, grad, losses, vocab, inv_tokens, TILE=tile, num_warps=16)
    return losses, grad


def triton_bytes(params, dtype):
    """The logits kernel's traffic: the row is read twice (see the kernel)."""
    tokens, vocab, size = params["tokens"], params["vocab"], element_size(dtype)
    if params["hidden"]:
        return float("nan")  # the GEMMs' traffic depends on cuBLAS's tiling: the ideal stands
    return (
        2 * tokens * vocab * size  # read the logits twice
        + tokens * vocab * size  # write dlogits
        + tokens * 8  # read the targets
        + tokens * 4 * 2  # write the per-token losses, read them for the mean
        + 4  # write the loss
    )


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON), modeled_bytes=triton_bytes)
def triton_variant(case):
    """one Triton program per token: log-sum-exp pass, gradient pass (after a cuBLAS x Wᵀ for hidden > 0,
    whose logits it overwrites with their gradient)"""
    tokens, target = case.params["tokens"], case["target"]
    losses = torch.empty(tokens, dtype=torch.float32, device=target.device)
    if not case.params["hidden"]:
        logits = case["logits"].contiguous()
        grad = torch.empty_like(logits)

        def from_logits():
            triton_cross_entropy(logits, target, grad, losses)
            return losses.mean(), grad

        return from_logits
    x, w = case["x"], case["weight"]

    def from_hidden():
        logits = x @ w.T
        triton_cross_entropy(logits, target, logits, losses)  # dlogits over the logits
        return losses.mean(), logits @ w, logits.T @ x

    return from_hidden


def chunk_tokens(vocab: int, dtype: torch.dtype) -> int:
    return max(1, CHUNK_BYTES // (vocab * torch.empty((), dtype=dtype).element_size()))


@FAMILY.variant("triton_chunked", kind="triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_chunked(case):
    """fused-linear form: chunks of tokens, each x Wᵀ -> Triton loss and gradient in place -> dx, dW += ;
    one chunk's logits held at a time, never the whole"""
    if not case.params["hidden"]:
        raise VariantSkipped("the fused-linear form takes hidden states and the head (hidden > 0), not logits")
    tokens, target, x, w = case.params["tokens"], case["target"], case["x"], case["weight"]
    chunk = chunk_tokens(case.params["vocab"], x.dtype)
    losses = torch.empty(tokens, dtype=torch.float32, device=x.device)
    dx = torch.empty_like(x)
    dw = torch.empty_like(w)

    def call():
        for index, start in enumerate(range(0, tokens, chunk)):
            rows = slice(start, start + chunk)
            logits = x[rows] @ w.T
            triton_cross_entropy(logits, target[rows], logits, losses[rows], tokens=tokens)
            torch.matmul(logits, w, out=dx[rows])
            # dW accumulates in W's dtype, as Liger's does: cuBLAS adds in fp32 and rounds once a chunk.
            if index == 0:
                torch.matmul(logits.T, x[rows], out=dw)
            else:
                dw.addmm_(logits.T, x[rows])
            # Freed here, not when the next chunk's x Wᵀ rebinds the name: that product is allocated
            # first, so two chunks' logits (2 x CHUNK_BYTES) would be held at once.
            del logits
        return losses.mean(), dx, dw

    return call
