"""Greedy sampling of a decode step in one kernel: each row's argmax over the vocabulary, written
where the next step reads its input token and into the generated-token matrix.

torch.argmax over 8 x 50,257 logits runs one block per row (8 blocks on 132 SMs) and takes 13.5 us
on an H100, then two copies write the token: ~15 us, 3% of GPT-2's decode step, for 0.8 MB. Here
the row is cut into CHUNK-wide pieces, one program each (8 x 13 programs), each reduces its piece to
(max, first index of the max), and the last program of a row to finish (kernels/common/arrival.py, as in
gelu_linear/skinny.py's split K) picks the winner in chunk order and writes both outputs.

Ties go to the lowest index, as torch.argmax's do. A NaN logit is not treated as the maximum
(torch's argmax would return it): the logits of a finite model are finite, and the greedy-token
check against Hugging Face would show it if they were not.
"""

from __future__ import annotations

import torch

from rooflint.core.triton_compat import tl, triton
from rooflint.kernels.common.arrival import last_to_arrive, rearm

CHUNK = 4096  # logits per program: 8 KB of bf16, a few loads per thread in flight


@triton.jit
def _greedy_kernel(
    logits_ptr, part_val_ptr, part_idx_ptr, count_ptr, tokens_ptr, token_ptr,
    V, logits_row, tokens_row, token_row, chunks,
    CHUNK: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(logits_ptr + row.to(tl.int64) * logits_row + offs, mask=offs < V, other=float("-inf"))
    x = x.to(tl.float32)
    best = tl.max(x, axis=0)
    # first index of the max within the chunk: the smallest offset whose value equals it
    first = tl.min(tl.where(x == best, offs, V), axis=0)
    tl.store(part_val_ptr + row * chunks + chunk, best)
    tl.store(part_idx_ptr + row * chunks + chunk, first)
    if last_to_arrive(count_ptr, row, chunks):
        c = tl.arange(0, BLOCK_C)
        vals = tl.load(part_val_ptr + row * chunks + c, mask=c < chunks, other=float("-inf"), cache_modifier=".cg")
        idxs = tl.load(part_idx_ptr + row * chunks + c, mask=c < chunks, other=V, cache_modifier=".cg")
        top = tl.max(vals, axis=0)
        winner = tl.min(tl.where(vals == top, idxs, V), axis=0).to(tl.int64)
        tl.store(tokens_ptr + row * tokens_row, winner)
        tl.store(token_ptr + row * token_row, winner)
        rearm(count_ptr, row)


class GreedyWorkspace:
    """Partials for one (rows, vocab) shape, allocated once, outside any captured graph."""

    def __init__(self, rows: int, vocab: int, device) -> None:
        self.chunks = triton.cdiv(vocab, CHUNK)
        self.values = torch.empty((rows, self.chunks), dtype=torch.float32, device=device)
        self.indices = torch.empty((rows, self.chunks), dtype=torch.int32, device=device)
        self.counters = torch.zeros(rows, dtype=torch.int32, device=device)  # each row's last program re-arms its own


def greedy_argmax(logits: torch.Tensor, tokens: torch.Tensor, token: torch.Tensor, ws: GreedyWorkspace) -> None:
    """tokens[r, 0] = token[r, 0] = argmax(logits[r]) for logits [rows, V] (rows may be strided);
    ``tokens`` and ``token`` are int64 column views [rows, 1] (e.g. one column of a [rows, N] matrix)."""
    rows, vocab = logits.shape
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    if tokens.dtype != torch.int64 or token.dtype != torch.int64:
        raise ValueError("greedy_argmax writes int64 token ids")
    _greedy_kernel[(rows, ws.chunks)](
        logits, ws.values, ws.indices, ws.counters, tokens, token,
        vocab, logits.stride(0), tokens.stride(0), token.stride(0), ws.chunks,
        CHUNK=CHUNK, BLOCK_C=max(2, triton.next_power_of_2(ws.chunks)), num_warps=4,
    )  # fmt: skip
