"""Y = act(LN(X) W^T + b) [+ R] for a few rows of X (M <= 16): the GEMMs of a decode step.

At M = 8 (one token of eight sequences) a GEMM does 2M = 16 FLOPs per weight element it reads, so
it is a weight stream: GPT-2's MLP up-projection reads 4.7 MB of W to make 48 KB of Y. A GEMM
kernel tiled for large M wastes most of each tensor-core tile and, worse, launches too few
programs to keep HBM busy (3072 / 128 = 24 tiles on 132 SMs). Here:
- W's rows go on the MMA's M side and X's few rows on its N side (16, X padded with zeros), the
  "swap AB" form of small-batch GEMMs, so each 16-row X tile is loaded once per K step;
- the tile is BLOCK_N rows of W, chosen from the GPU's SM count so that the grid has a program for
  at least every other SM where N allows it (smaller BLOCK_N, more programs, more loads in flight);
  where N is too narrow for that and rows are long (GPT-2's MLP down-projection, 768 x 3072: 48
  programs), K is split across programs and the last program of each N tile to finish sums the
  partials in a fixed order (deterministic) and applies the epilogue, so the split costs no second
  kernel;
- the whole K loop is software-pipelined (num_stages tiles of W in flight per program), since a
  program's only job is to keep its share of the weight stream moving;
- a decode step is ~100 kernels of a few microseconds, so what sits between them matters as much
  as their bodies. Fusions remove kernels: a layer norm folded into W (fold_layer_norm; the row
  statistics come from the same X tiles the MMA reads), bias, tanh-GELU and a residual add on the
  fp32 accumulator before the one rounding, and the K and V columns of a QKV projection scattered
  into the paged KV cache. With ROOFLINT_PDL=1 on sm_90 the GEMM runs the CUDA kernel of
  skinny_pdl.cu (skinny_pdl.py) where its shape fits: each block holds its whole share
  of W in registers before it waits for the kernel before it. Elsewhere under PDL this kernel's
  blocks start their W stream into L2 before they wait (measured: no gain in GPT-2's decode).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rooflint.core.triton_compat import interpreting, tl, triton
from rooflint.kernels import sm_count
from rooflint.kernels.common.arrival import last_to_arrive, rearm
from rooflint.kernels.common.gelu_tanh import gelu_tanh_sigmoid
from rooflint.kernels.common.pdl import pdl_enabled, pdl_launch, prefetch_l2, wait
from rooflint.kernels.gelu_linear.tiles import INTERPRETER_SMS

MAX_ROWS = 16  # X rows the kernel takes: the N side of one MMA tile
MAX_SPLITS = 4
# A program streams at most this many elements of each W row before K is split. At K = 768 a split
# costs more (the partials' round trip through L2 and the arrival counter) than the programs it adds
# bring; at K = 3072 four splits of 768 keep more W streams in flight than one of 3072.
K_PER_PROGRAM = 768


@dataclass(frozen=True)
class SkinnyTile:
    block_n: int  # rows of W per program
    block_k: int
    stages: int
    warps: int

    @property
    def label(self) -> str:
        return f"{self.block_n}x{self.block_k} s{self.stages} w{self.warps}"


# Largest first: choose_tile() takes the first whose grid has a program for at least every other SM.
# Each stage holds a block_n x block_k tile of W (8 KB at 32x128 bf16) and a 16 x block_k tile of X.
# BLOCK_K 128 with four stages beat 256 at every GPT-2 shape (more, shorter steps in flight); 32
# rows beat 16 where N gives enough programs (2304 x 768: 5.4 against 6.1 us), and 16 keeps 48
# programs at N = 768 (4.0 against 4.3 us for 32).
TILES = (SkinnyTile(32, 128, 4, 4), SkinnyTile(16, 128, 4, 4))
INTERPRETER_TILE = SkinnyTile(16, 32, 1, 4)


def choose_tile(n: int, sm_count: int) -> SkinnyTile:
    """The largest tile whose N/BLOCK_N programs cover at least half the SMs; else the smallest."""
    for tile in TILES:
        if 2 * triton.cdiv(n, tile.block_n) >= sm_count:
            return tile
    return TILES[-1]


def choose_splits(n: int, k: int, tile: SkinnyTile, sm_count: int) -> int:
    """K splits for a narrow projection (fewer programs than SMs) whose rows are longer than
    K_PER_PROGRAM: one split per K_PER_PROGRAM elements, at most MAX_SPLITS and one per K step."""
    if triton.cdiv(n, tile.block_n) >= sm_count:
        return 1
    return max(1, min(triton.cdiv(k, K_PER_PROGRAM), MAX_SPLITS, triton.cdiv(k, tile.block_k)))


@dataclass(frozen=True)
class KVAppend:
    """Scatter the K and V columns of a QKV projection into a paged cache: columns
    [start, start + width) are K, the next ``width`` are V, ``heads`` heads of ``head_dim``; row m's
    head h goes to slot ``slots[m * heads + h]`` of the pools viewed as [slots, head_dim]."""

    k_rows: torch.Tensor
    v_rows: torch.Tensor
    slots: torch.Tensor
    start: int
    heads: int
    head_dim: int


class _SplitWorkspace:
    """fp32 partials [splits, N, BLOCK_M] and one arrival counter per N tile, per (device, N, splits).

    Counters are left at zero by the last arrival, so a workspace serves every later call and every
    CUDA-graph replay (kernels on one stream never overlap it: PDL waits before touching memory)."""

    _cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    @classmethod
    def get(cls, device, n: int, splits: int, tiles: int):
        key = (str(device), n, splits, tiles)
        if key not in cls._cache:
            cls._cache[key] = (
                torch.empty((splits, n, MAX_ROWS), dtype=torch.float32, device=device),
                torch.zeros(tiles, dtype=torch.int32, device=device),
            )
        return cls._cache[key]


@triton.jit
def _skinny_kernel(
    x_ptr, w_ptr, b_ptr, r_ptr, y_ptr, c1_ptr, c2_ptr, slot_ptr, kc_ptr, vc_ptr, part_ptr, count_ptr,
    M, N, K, x_row, r_row, y_row, eps, kv_start, kv_width, k_chunk,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    HAS_BIAS: tl.constexpr, GELU: tl.constexpr, RESIDUAL: tl.constexpr, NORM: tl.constexpr,
    APPEND: tl.constexpr, KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr,
    UPCAST: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    n_mask = offs_n < N
    m_mask = offs_m < M
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * K  # W is [N, K], rows contiguous (nn.Linear)
    x_rows = x_ptr + offs_m[:, None] * x_row
    k_begin = tl.program_id(1) * k_chunk
    k_end = tl.minimum(k_begin + k_chunk, K)
    if PDL:
        # W is constant, so its stream may start before the previous kernel has finished: each
        # program asks for its W rows into L2, then waits (griddepcontrol.wait) before touching
        # anything another kernel writes, then lets the next kernel's blocks get resident.
        rows = w_ptr + tl.minimum(offs_n, N - 1).to(tl.int64) * K + k_begin
        row_bytes = (k_end - k_begin) * (w_ptr.dtype.element_ty.primitive_bitwidth // 8)
        prefetch_l2(rows, tl.full([BLOCK_N], 0, tl.int32) + row_bytes)
        wait()
    out_mask = n_mask[:, None] & m_mask[None, :]
    bias, res, slot, in_k, in_v, col = epilogue_operands(
        b_ptr, r_ptr, slot_ptr, offs_n, offs_m, n_mask, out_mask, r_row, kv_start, kv_width,
        BLOCK_N, BLOCK_M, HAS_BIAS, RESIDUAL, APPEND, KV_HEADS, HEAD_DIM, "",
    )  # fmt: skip
    if NORM:
        # The layer norm folded into the GEMM (fold_layer_norm): see stream_w.
        c1 = tl.load(c1_ptr + offs_n, mask=n_mask, other=0.0)
        c2 = tl.load(c2_ptr + offs_n, mask=n_mask, other=0.0)
    acc, s1, s2 = stream_w(x_rows, w_rows, k_begin, k_end, K, m_mask, n_mask, x_ptr + offs_m * x_row,
                            BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, NORM, UPCAST, "")  # fmt: skip
    if NORM:
        acc = apply_norm(acc, s1, s2, K, eps, c1, c2)
    last = True
    if SPLITS > 1:
        last, acc = sum_splits(acc, part_ptr, count_ptr, pid_n, tl.program_id(1), N, offs_n, offs_m, out_mask,
                                BLOCK_M, SPLITS)  # fmt: skip
    if last:
        epilogue(acc, bias, res, slot, in_k, in_v, col, offs_n, offs_m, out_mask, y_ptr, kc_ptr, vc_ptr, y_row,
                  HAS_BIAS, GELU, RESIDUAL, APPEND, HEAD_DIM)  # fmt: skip


@triton.jit
def epilogue_operands(
    b_ptr, r_ptr, slot_ptr, offs_n, offs_m, n_mask, out_mask, r_row, kv_start, kv_width,
    BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, HAS_BIAS: tl.constexpr, RESIDUAL: tl.constexpr,
    APPEND: tl.constexpr, KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, R_CACHE: tl.constexpr,
):  # fmt: skip
    """(bias, residual, slot, in_k, in_v, col) for epilogue; zeros where a feature is off.

    Loaded before the K loop, not after it: each is a DRAM round trip (~1 us) that would otherwise
    start only once the W stream has drained, on the critical path of a kernel that lasts a few
    microseconds. Small (BLOCK_N x BLOCK_M at most), so they wait in registers. Every K split
    loads them; only the last arrival uses them."""
    bias = tl.zeros((BLOCK_N,), dtype=tl.float32)
    if HAS_BIAS:
        bias = tl.load(b_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
    res = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    if RESIDUAL:
        res = tl.load(r_ptr + offs_m[None, :] * r_row + offs_n[:, None], mask=out_mask, other=0.0,
                      cache_modifier=R_CACHE).to(tl.float32)  # fmt: skip
    slot = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.int64)
    in_k = n_mask & False
    in_v = in_k
    col = offs_n * 0
    if APPEND:
        # Column c of K (or V) is head c // HEAD_DIM, element c % HEAD_DIM of row m's new token.
        rel = offs_n - kv_start
        in_k = (rel >= 0) & (rel < kv_width) & n_mask
        in_v = (rel >= kv_width) & (rel < 2 * kv_width) & n_mask
        col = tl.where(in_v, rel - kv_width, rel)
        col = tl.where(in_k | in_v, col, 0)
        slot = tl.load(slot_ptr + offs_m[None, :] * KV_HEADS + (col // HEAD_DIM)[:, None],
                       mask=out_mask & (in_k | in_v)[:, None], other=0).to(tl.int64)  # fmt: skip
    return bias, res, slot, in_k, in_v, col


@triton.jit
def sum_splits(acc, part_ptr, count_ptr, tile, split, N, offs_n, offs_m, out_mask,
                BLOCK_M: tl.constexpr, SPLITS: tl.constexpr):  # fmt: skip
    """Publish this K split's partial of N tile ``tile``; (True, the sum of all splits) in the tile's
    last arrival (acq_rel counter), (False, acc) elsewhere. Summed in a fixed order, so the result
    does not depend on who finished first."""
    part = part_ptr + offs_n[:, None] * BLOCK_M + offs_m[None, :]
    tl.store(part + split * N * BLOCK_M, acc, mask=out_mask)
    last = last_to_arrive(count_ptr, tile, SPLITS)
    if last:
        acc = tl.zeros(acc.shape, dtype=tl.float32)
        for s in range(SPLITS):
            acc += tl.load(part + s * N * BLOCK_M, mask=out_mask, other=0.0, cache_modifier=".cg")
        rearm(count_ptr, tile)
    return last, acc


@triton.jit
def stream_w(
    x_rows, w_rows, k_begin, k_end, K, m_mask, n_mask, x_first,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    NORM: tl.constexpr, UPCAST: tl.constexpr, X_CACHE: tl.constexpr,
):  # fmt: skip
    """acc [BLOCK_N, BLOCK_M] = W[rows, k_begin:k_end] X[:, k_begin:k_end]^T, the weight stream.

    With NORM, the layer norm folded into the GEMM (fold_layer_norm): the MMA takes X less a per-row
    shift (its first element, at ``x_first``) and accumulates the row statistics (s1, s2) from the
    same tiles, so LN(X) W^T = rstd * (acc - mean' * c1) + c2 (apply_norm) costs no pass of its
    own. The shift keeps E[x^2] - E[x]^2 from cancelling when a row's mean is large against its
    spread. ``X_CACHE`` is X's load cache modifier: ".cg" where another SM wrote X in this kernel."""
    offs_k = tl.arange(0, BLOCK_K)
    s1 = tl.zeros((BLOCK_M,), dtype=tl.float32)
    s2 = tl.zeros((BLOCK_M,), dtype=tl.float32)
    if NORM:
        shift = tl.load(x_first, mask=m_mask, other=0.0, cache_modifier=X_CACHE).to(tl.float32)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)  # Y^T tile: W rows x X rows
    for k0 in range(k_begin, k_end, BLOCK_K):
        cols = k0 + offs_k
        if EVEN_K:
            x_mask = m_mask[:, None]
            w = tl.load(w_rows + cols[None, :], mask=n_mask[:, None], other=0.0)
        else:
            x_mask = m_mask[:, None] & (cols < K)[None, :]
            w = tl.load(w_rows + cols[None, :], mask=n_mask[:, None] & (cols < K)[None, :], other=0.0)
        x = tl.load(x_rows + cols[None, :], mask=x_mask, other=0.0, cache_modifier=X_CACHE)
        if NORM:
            xs = tl.where(x_mask, x.to(tl.float32) - shift[:, None], 0.0)
            s1 += tl.sum(xs, axis=1)
            s2 += tl.sum(xs * xs, axis=1)
            x = xs.to(x_rows.dtype.element_ty)  # rounded once, as an unfused layer norm's output is
        if UPCAST:  # the CPU interpreter multiplies 16-bit dot operands as raw bit patterns
            w, x = w.to(tl.float32), x.to(tl.float32)
        acc = tl.dot(w, tl.trans(x), acc)
    return acc, s1, s2


@triton.jit
def apply_norm(acc, s1, s2, K, eps, c1, c2):
    """The folded layer norm's correction: rstd * (acc - mean' * c1) + c2 (see stream_w)."""
    mean_shifted = s1 / K
    rstd = 1.0 / tl.sqrt(tl.maximum(s2 / K - mean_shifted * mean_shifted, 0.0) + eps)
    return rstd[None, :] * (acc - mean_shifted[None, :] * c1[:, None]) + c2[:, None]


@triton.jit
def epilogue(
    z, bias, res, slot, in_k, in_v, col, offs_n, offs_m, out_mask, y_ptr, kc_ptr, vc_ptr, y_row,
    HAS_BIAS: tl.constexpr, GELU: tl.constexpr, RESIDUAL: tl.constexpr, APPEND: tl.constexpr, HEAD_DIM: tl.constexpr,
):  # fmt: skip
    if HAS_BIAS:
        z += bias[:, None]
    if GELU:
        z = gelu_tanh_sigmoid(z)
    if RESIDUAL:
        z += res
    y = z.to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + offs_m[None, :] * y_row + offs_n[:, None], y, mask=out_mask)
    if APPEND:
        dst = slot * HEAD_DIM + (col % HEAD_DIM)[:, None]
        tl.store(kc_ptr + dst, y.to(kc_ptr.dtype.element_ty), mask=out_mask & in_k[:, None])
        tl.store(vc_ptr + dst, y.to(vc_ptr.dtype.element_ty), mask=out_mask & in_v[:, None])


@dataclass(frozen=True)
class FoldedNorm:
    """A layer norm folded into the linear after it (fold_layer_norm): W' = W diag(gamma) in W's
    dtype, and two fp32 vectors, c1 = W' 1 (what the mean subtracts) and c2 = W beta + b."""

    w: torch.Tensor
    c1: torch.Tensor
    c2: torch.Tensor


def fold_layer_norm(ln_w: torch.Tensor, ln_b: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> FoldedNorm:
    """Once per weight (a model's kernel set keeps the result): LN(x) W^T + b becomes
    rstd * ((x - mean) W'^T) + c2, so the kernel needs no normalised copy of x. c1 sums the
    rounded W' that the MMA multiplies, so the mean cancels against exactly what was summed."""
    folded = (w.float() * ln_w.float()[None, :]).to(w.dtype).contiguous()
    c2 = w.float() @ ln_b.float() + (b.float() if b is not None else 0.0)
    return FoldedNorm(folded, folded.float().sum(dim=1).contiguous(), c2.contiguous())


def skinny_norm_linear(
    x: torch.Tensor,
    folded: FoldedNorm,
    eps: float,
    gelu: bool = False,
    append: KVAppend | None = None,
    out: torch.Tensor | None = None,
    tile: SkinnyTile | None = None,
) -> torch.Tensor:
    """act(layer_norm(x) @ w.T + b) for x [M <= 16, K], the norm and linear given as fold_layer_norm's
    result; ``append`` also writes the K and V columns into a paged cache. No K split: the row
    statistics need all of K in one program."""
    return _launch(x, folded.w, None, gelu, None, out, tile, (folded.c1, folded.c2, eps), append, 1)


def skinny_linear(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None = None,
    gelu: bool = False,
    residual: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    tile: SkinnyTile | None = None,
    splits: int | None = None,
) -> torch.Tensor:
    """act(x @ w.T + b) (+ residual) for x [M <= 16, K] (rows may be strided), w [N, K] contiguous.
    ``splits`` overrides the K split (1 = none)."""
    return _launch(x, w, b, gelu, residual, out, tile, None, None, splits)


def _launch(x, w, b, gelu, residual, out, tile, norm, append, splits) -> torch.Tensor:
    m, k = x.shape
    n = w.shape[0]
    if m > MAX_ROWS:
        raise ValueError(f"skinny_linear takes at most {MAX_ROWS} rows, not {m}")
    if x.stride(1) != 1:
        x = x.contiguous()
    w = w.contiguous()
    out = torch.empty((m, n), dtype=x.dtype, device=x.device) if out is None else out
    pdl = pdl_enabled(x.device)
    if tile is None and splits in (None, 1) and pdl:
        from rooflint.kernels.gelu_linear import skinny_pdl, skinny_ring

        if norm is None and append is None and not gelu and skinny_ring.pays(m, k, n, x.device):
            ring = skinny_ring.linear_where_it_fits(x, w, b, residual, out, pdl=True)
            if ring is not None:
                return ring
        if skinny_pdl.fits(x, w, residual, out):
            return skinny_pdl.launch(x, w, b, gelu, residual, out, norm, append)
    sms = sm_count(x.device, INTERPRETER_SMS)
    if tile is None:
        tile = INTERPRETER_TILE if interpreting() else choose_tile(n, sms)
    tiles = triton.cdiv(n, tile.block_n)
    splits = splits or choose_splits(n, k, tile, sms)
    k_chunk = triton.cdiv(triton.cdiv(k, splits), tile.block_k) * tile.block_k  # whole K steps per split
    splits = triton.cdiv(k, k_chunk)
    part, count = _SplitWorkspace.get(x.device, n, splits, tiles) if splits > 1 else (out, out)
    r = residual if residual is not None else out
    c1, c2, eps = norm if norm is not None else (w, w, 0.0)
    kv = append or KVAppend(out, out, out, 0, 1, 1)
    # PDL brings the L2 prefetch of W, a bulk copy of whole rows: 16-byte aligned and sized.
    aligned = w.data_ptr() % 16 == 0 and (k * w.element_size()) % 16 == 0 and (k_chunk * w.element_size()) % 16 == 0
    pdl = pdl and aligned
    _skinny_kernel[(tiles, splits)](
        x, w, b if b is not None else w, r, out, c1, c2, kv.slots, kv.k_rows, kv.v_rows, part, count,
        m, n, k, x.stride(0), r.stride(0), out.stride(0), eps, kv.start, kv.heads * kv.head_dim, k_chunk,
        BLOCK_M=MAX_ROWS, BLOCK_N=tile.block_n, BLOCK_K=tile.block_k, EVEN_K=k % tile.block_k == 0,
        HAS_BIAS=b is not None, GELU=gelu, RESIDUAL=residual is not None, NORM=norm is not None,
        APPEND=append is not None, KV_HEADS=kv.heads, HEAD_DIM=kv.head_dim, SPLITS=splits,
        UPCAST=interpreting(), PDL=pdl, num_warps=tile.warps, num_stages=tile.stages, **pdl_launch(pdl),
    )  # fmt: skip
    return out
