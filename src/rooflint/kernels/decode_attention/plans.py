"""decode_attention: plans implementation."""

from __future__ import annotations

import torch

from rooflint.core.triton_compat import triton
from rooflint.kernels import sm_count

MIN_SPLIT_TOKENS = 128  # below this a program's fixed cost (q load, partial write) stops paying


def split_plan(
    batch: int, h_kv: int, c: int, sms: int, block: int = 64, min_tokens: int = MIN_SPLIT_TOKENS
) -> tuple[int, int]:
    """(splits, chunk tokens): enough programs for 4 per SM and at least 2 splits, none shorter than
    ``min_tokens`` (MIN_SPLIT_TOKENS, or a chunk that fits registers: preload_plan).

    At least 2, even where the heads alone fill the GPU: the large MHA shape (32 x 32 heads, 8,192
    keys) in one split is 1,024 programs of 4 MB, 2.59 waves of the 396 that fit at once (3 an SM),
    and its last wave's long programs run with 41% of the SMs' slots empty. 2 splits halve those
    programs, so the last wave's tail is half as long (docs/perf-notes compares 2, 3 and 4).
    """
    want = max(2, triton.cdiv(4 * sms, batch * h_kv))
    return _chunked(c, max(1, min(want, triton.cdiv(c, min_tokens))), block)


def wave_plan(batch: int, h_kv: int, c: int, slots: int, block: int = 64) -> tuple[int, int]:
    """(splits, chunk tokens) for a kernel of which ``slots`` blocks are resident at once: the split
    count whose grid fills its waves best, the fewest splits among those within 2% of the best.
    Splits are at most one per MIN_SPLIT_TOKENS, and at most 4 waves' worth of splits.

    split_plan aims at 4 programs per SM whatever the kernel holds. The CUDA kernel holds 3 blocks
    per SM at G=4 (its ring and merge buffers: 4 x 57 KB would pass the 228 KB of an SM), and one
    split per wave of heads left it at 2 blocks per SM: 0.681 of the H200's read stream against
    0.706 with split_plan (reference runs at 9c0d920 and dc4f40f). 32 x 8 heads in 3 splits are
    768 blocks, 1.94 waves of 396: 97% full. The tensor-core kernel (sm_80+) holds 2 blocks an SM
    at D=128: 256 heads in 1 split fill 97% of 264 slots, and ran faster than 2-4 splits (H200)."""
    heads = batch * h_kv
    most = max(1, min(triton.cdiv(c, MIN_SPLIT_TOKENS), 4 * triton.cdiv(slots, heads)))

    def fill(splits: int) -> float:
        return heads * splits / (triton.cdiv(heads * splits, slots) * slots)

    # Whole key blocks per split can merge split counts, so the candidates are the plans themselves.
    plans = sorted({_chunked(c, s, block) for s in range(1, most + 1)})
    best = max(fill(splits) for splits, _ in plans)
    return next(plan for plan in plans if fill(plan[0]) >= best - 0.02)


def _chunked(c: int, splits: int, block: int) -> tuple[int, int]:
    chunk = triton.cdiv(triton.cdiv(c, splits), block) * block  # whole key blocks per program
    return triton.cdiv(c, chunk), chunk


class DecodeWorkspace:
    """Output and partial buffers for one problem shape, allocated once, outside the timed call.

    ``q`` is [B, H, 1, D]; the cache holds ``h_kv`` heads of ``c`` tokens each.
    """

    def __init__(self, q: torch.Tensor, h_kv: int, c: int, plan: tuple[int, int] | None = None) -> None:
        b, h, _, d = q.shape
        if h % h_kv or d & (d - 1) or d < 16:
            raise ValueError("decode kernels need h_kv | h and a power-of-two head_dim >= 16")
        self.splits, self.chunk = plan or split_plan(b, h_kv, c, sm_count(q.device, on_cpu=132))
        self.out = torch.empty((b, h, 1, d), dtype=q.dtype, device=q.device)
        self.part_acc = torch.empty((b * h, self.splits, d), dtype=torch.float32, device=q.device)
        self.part_ml = torch.empty((b * h, self.splits, 2), dtype=torch.float32, device=q.device)


def q_layout(q: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(q, elements between sequences): q as given when each sequence's heads are dense rows of
    D (a view of a fused QKV output is), else a contiguous copy."""
    b, h, _, d = q.shape
    if q.stride(3) == 1 and (h == 1 or q.stride(1) == d) and q.stride(0) % 8 == 0:
        return q, q.stride(0)
    return q.contiguous(), h * d


def kv_layout(k: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(k, rows each (b, kv head) owns): k as given when it is a length-prefix view of a dense
    [B, H_kv, capacity, D] buffer (a preallocated cache), else a contiguous copy."""
    b, h_kv, c, d = k.shape
    rows = k.stride(1) // d
    dense = k.stride(3) == 1 and k.stride(2) == d and k.stride(1) == rows * d and k.stride(0) == h_kv * rows * d
    return (k, rows) if dense else (k.contiguous(), c)


def cache_layout(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(k, v, rows each (b, kv head) owns), shared by both: the kernels take one row count for the two."""
    (k_in, rows), (v_in, v_rows) = kv_layout(k), kv_layout(v)
    if v_rows != rows or v_in.stride() != k_in.stride():
        return k.contiguous(), v.contiguous(), k.shape[2]
    return k_in, v_in, rows
