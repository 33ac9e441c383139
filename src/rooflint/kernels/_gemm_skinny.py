"""Y = act(X W^T + b) [+ R] for a few rows of X (M <= 16): the GEMMs of a decode step.

At M = 8 (one token of eight sequences) a GEMM does 2M = 16 FLOPs per weight element it reads, so
it is a weight stream: GPT-2's MLP up-projection reads 4.7 MB of W to make 48 KB of Y. A GEMM
kernel tiled for large M wastes most of each tensor-core tile and, worse, launches too few
programs to keep HBM busy (3072 / 128 = 24 tiles on 132 SMs). Here:
- W's rows go on the MMA's M side and X's few rows on its N side (16, X padded with zeros), the
  "swap AB" form of small-batch GEMMs, so each 16-row X tile is loaded once per K step;
- the tile is BLOCK_N rows of W, chosen from the GPU's SM count so that the grid has at least one
  program per SM where N allows it (smaller BLOCK_N, more programs, more loads in flight);
- the whole K loop is software-pipelined (num_stages tiles of W in flight per program), since a
  program's only job is to keep its share of the weight stream moving;
- bias, tanh-GELU and a residual add are applied to the fp32 accumulator before the one rounding
  to the output dtype, so the residual stream takes no extra kernel or HBM round trip.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rooflint.core.triton_compat import interpreting, tl, triton
from rooflint.kernels import sm_count
from rooflint.kernels.gelu_linear import GELU_C1, GELU_C3, INTERPRETER_SMS  # the one tanh-GELU, in log2 form

MAX_ROWS = 16  # X rows the kernel takes: the N side of one MMA tile


@dataclass(frozen=True)
class SkinnyTile:
    block_n: int  # rows of W per program
    block_k: int
    stages: int
    warps: int

    @property
    def label(self) -> str:
        return f"{self.block_n}x{self.block_k} s{self.stages} w{self.warps}"


# Largest first: choose_tile() takes the first whose grid has a program for every SM. Each stage
# holds a block_n x block_k tile of W (16 KB at 64x128 bf16) and a 16 x block_k tile of X.
TILES = (SkinnyTile(64, 128, 4, 4), SkinnyTile(32, 256, 4, 4), SkinnyTile(16, 256, 4, 4))
INTERPRETER_TILE = SkinnyTile(16, 32, 1, 4)


def choose_tile(n: int, sm_count: int) -> SkinnyTile:
    """The largest tile whose N/BLOCK_N programs cover every SM; else the smallest (most programs)."""
    for tile in TILES:
        if triton.cdiv(n, tile.block_n) >= sm_count:
            return tile
    return TILES[-1]


@triton.jit
def _skinny_kernel(
    x_ptr, w_ptr, b_ptr, r_ptr, y_ptr, M, N, K, x_row, r_row, y_row,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    HAS_BIAS: tl.constexpr, GELU: tl.constexpr, RESIDUAL: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    n_mask = offs_n < N
    m_mask = offs_m < M
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * K  # W is [N, K], rows contiguous (nn.Linear)
    x_rows = x_ptr + offs_m[:, None] * x_row
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)  # Y^T tile: W rows x X rows
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + offs_k
        if EVEN_K:
            w = tl.load(w_rows + cols[None, :], mask=n_mask[:, None], other=0.0)
            x = tl.load(x_rows + cols[None, :], mask=m_mask[:, None], other=0.0)
        else:
            k_mask = cols < K
            w = tl.load(w_rows + cols[None, :], mask=n_mask[:, None] & k_mask[None, :], other=0.0)
            x = tl.load(x_rows + cols[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        if UPCAST:  # the CPU interpreter multiplies 16-bit dot operands as raw bit patterns
            w, x = w.to(tl.float32), x.to(tl.float32)
        acc = tl.dot(w, tl.trans(x), acc)
    z = acc
    if HAS_BIAS:
        z += tl.load(b_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[:, None]
    if GELU:
        z = tl.fdiv(z, 1.0 + tl.exp2(z * (GELU_C1 + GELU_C3 * z * z)), ieee_rounding=False)
    out_mask = n_mask[:, None] & m_mask[None, :]
    if RESIDUAL:
        z += tl.load(r_ptr + offs_m[None, :] * r_row + offs_n[:, None], mask=out_mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs_m[None, :] * y_row + offs_n[:, None], z.to(y_ptr.dtype.element_ty), mask=out_mask)


def skinny_linear(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None = None,
    gelu: bool = False,
    residual: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    tile: SkinnyTile | None = None,
) -> torch.Tensor:
    """act(x @ w.T + b) (+ residual) for x [M <= 16, K] (rows may be strided), w [N, K] contiguous."""
    m, k = x.shape
    n = w.shape[0]
    if m > MAX_ROWS:
        raise ValueError(f"skinny_linear takes at most {MAX_ROWS} rows, not {m}")
    if x.stride(1) != 1:
        x = x.contiguous()
    w = w.contiguous()
    out = torch.empty((m, n), dtype=x.dtype, device=x.device) if out is None else out
    if tile is None:
        tile = INTERPRETER_TILE if interpreting() else choose_tile(n, sm_count(x.device, INTERPRETER_SMS))
    r = residual if residual is not None else out
    _skinny_kernel[(triton.cdiv(n, tile.block_n),)](
        x, w, b if b is not None else w, r, out, m, n, k, x.stride(0), r.stride(0), out.stride(0),
        BLOCK_M=MAX_ROWS, BLOCK_N=tile.block_n, BLOCK_K=tile.block_k, EVEN_K=k % tile.block_k == 0,
        HAS_BIAS=b is not None, GELU=gelu, RESIDUAL=residual is not None, UPCAST=interpreting(),
        num_warps=tile.warps, num_stages=tile.stages,
    )  # fmt: skip
    return out
