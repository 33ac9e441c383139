"""weight_only_gemm: the Triton weight stream, and the bf16 skinny kernel it is measured against.

Each program owns BLOCK_N rows of W and streams their 1-byte codes once, in the "swap AB" form of
kernels/gelu_linear/skinny.py: W's rows on the MMA's M side, the <= 16 rows of x (zero-padded) on
its N side. Codes become bf16 in registers (exact: int8 and e4m3 values are all bf16 values), so
the MMA is a bf16 one; the scale multiplies the fp32 accumulator, once per output in the epilogue
(per channel), or once per K step of a group (per group: the step is the group, so each partial
product has one scale). Where N gives fewer programs than SMs, K is split across programs and the
last to arrive sums the partials in a fixed order (kernels/common/arrival.py).

What sets the speed once the bytes are halved is the dequantization, not the loads (SASS of the
K loop, sm_90, Triton's own lowering): every code is turned into bf16 by ALU instructions, and an
SM's ALU pipe issues a warp instruction every other cycle per scheduler. So:
- each warp owns its own 16 W rows (BLOCK_N = 16 x warps, at most 2 warps): with 4 warps on a
  32-row tile the MMA layout gave each W row to two warps, and both dequantized it; with 4 warps on
  64 rows Triton picks Hopper's wgmma with W in registers, whose operand layout it fills from shared
  memory two bytes at a time (LDS.U16 and a PRMT per pair). One or two warps keep mma.sync, whose
  int8 operand comes from shared memory 8 codes per LDS.64;
- int8 -> bf16 is Triton's bit trick (two PRMT, four LOP3, two bf16x2 subtracts per 4 codes);
- e4m3 -> bf16 is ours (e4m3_to_bf16x4): Triton's cast goes through cvt.bf16.f16, the conversion
  unit (16 lanes an SM on Hopper: two F2F and one F2FP per pair of codes), which held the fp8 stream
  to ~1.4 TB/s. Bit operations instead: the code's exponent and mantissa land in bf16's low
  exponent bits (value 2^-120 of the code, e4m3's subnormals as bf16 subnormals) and one bf16x2
  multiply by 2^120 restores it exactly; 2 ALU instructions a code against int8's 1.5.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import interpreting, tl, triton
from rooflint.kernels import sm_count
from rooflint.kernels.common.arrival import last_to_arrive, rearm
from rooflint.kernels.common.pdl import decode_chain
from rooflint.kernels.gelu_linear import skinny_pdl
from rooflint.kernels.gelu_linear.skinny import skinny_linear
from rooflint.kernels.gelu_linear.skinny_pdl import SKINNY_PDL_CU
from rooflint.kernels.gelu_linear.skinny_ring import SKINNY_RING_CU
from rooflint.kernels.weight_only_gemm import FAMILY, MAX_ROWS, bf16_weight_bytes

INTERPRETER_SMS = 3
MAX_SPLITS = 8
MMA_ROWS = 16  # W rows one warp's mma.sync tile covers
# A K split costs a round trip of the fp32 partials through L2 and an arrival counter: worth it only
# where each split still streams this many codes of a row (skinny's rule, in bytes: 768 bf16 there).
K_PER_SPLIT = 1024


@dataclass(frozen=True)
class StreamTile:
    block_n: int  # rows of W per program: MMA_ROWS per warp
    block_k: int  # codes per row per K step
    stages: int
    warps: int

    @property
    def label(self) -> str:
        return f"{self.block_n}x{self.block_k} s{self.stages} w{self.warps}"


# Largest first. A stage holds block_n x 256 bytes of W and 16 x 256 x 2 of x (x's bytes come from
# L2, once per program: M rows of x per block_n rows of W); 3 stages are 24-48 KB of shared memory,
# 4-9 programs an SM. Three stages of 256 codes keep two K steps (8-16 KB) in flight a program.
TILES = (StreamTile(64, 256, 3, 2), StreamTile(32, 256, 3, 2), StreamTile(16, 256, 3, 1))
INTERPRETER_TILE = StreamTile(16, 32, 1, 1)


def plan(n: int, k: int, m: int, group: int, sms: int, tile: StreamTile | None = None, splits: int | None = None):
    """(tile, K splits), among the tiles that read no more bytes of x from L2 than of W from DRAM
    (block_n >= 2M), largest first:
    1. the first whose grid has a program for every SM unsplit (N wide enough: no partials);
    2. else the first whose K split gives every SM a program: narrow N and long rows take the wide
       tile split deep (64 rows, K = 8192, N = 2048: 32 tiles x 8 splits) rather than the 16-row,
       one-warp tile split less (128 x 3), whose programs keep a quarter of the bytes in flight;
    3. else the one with the most programs.
    Its K step is cut to the group where groups are narrower. A split goes towards two programs
    an SM, each streaming K_PER_SPLIT codes of a row or more. ``tile`` and ``splits`` override."""
    if tile is None:
        fitting = [t for t in TILES if t.block_n >= 2 * m] or [TILES[0]]
        if interpreting():
            tile = INTERPRETER_TILE
        else:
            unsplit = [t for t in fitting if triton.cdiv(n, t.block_n) >= sms]
            programs = {t: triton.cdiv(n, t.block_n) * _splits(n, k, t, sms) for t in fitting}
            split = [t for t in fitting if programs[t] >= sms]
            tile = (unsplit or split or [max(fitting, key=programs.__getitem__)])[0]
    if group:
        tile = StreamTile(tile.block_n, min(tile.block_k, group), tile.stages, tile.warps)
    if splits is None:
        splits = 2 if interpreting() and triton.cdiv(n, tile.block_n) < sms else _splits(n, k, tile, sms)
    return tile, max(1, min(splits, triton.cdiv(k, tile.block_k)))


def _splits(n: int, k: int, tile: StreamTile, sms: int) -> int:
    """K splits for ``tile``: none where N gives every SM a program; else towards two programs an SM,
    each split streaming K_PER_SPLIT codes of a row or more, at most MAX_SPLITS."""
    tiles = triton.cdiv(n, tile.block_n)
    if tiles >= sms:
        return 1
    return max(1, min(triton.cdiv(2 * sms, tiles), k // K_PER_SPLIT, MAX_SPLITS))


_WORKSPACES: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def _workspace(device, n: int, splits: int, tiles: int):
    """fp32 partials [splits, N, MAX_ROWS] and one arrival counter per N tile; the last arrival
    leaves each counter at zero, so one workspace serves every later call."""
    key = (str(device), n, splits, tiles)
    if key not in _WORKSPACES:
        _WORKSPACES[key] = (
            torch.empty((splits, n, MAX_ROWS), dtype=torch.float32, device=device),
            torch.zeros(tiles, dtype=torch.int32, device=device),
        )
    return _WORKSPACES[key]


# e4m3 byte b = s eeee mmm -> bf16 bits s 000 eeee mmm 0000, i.e. the code times 2^-120 (e4m3's
# exponent bias is 7, bf16's 127), then one multiply by 2^120 (bf16 0x7b80). Four codes a 32-bit
# register: PRMT moves bytes 0 and 1 (2 and 3) into the high byte of each 16-bit half.
E4M3_TO_BF16X4 = tl.constexpr("""{
.reg .b32 a<2>, b<2>, s;
mov.b32 s, 0x7b807b80;
prmt.b32 a0, 0, $2, 0x5140;
prmt.b32 a1, 0, $2, 0x7362;
and.b32 b0, a0, 0x7f007f00;
and.b32 b1, a1, 0x7f007f00;
shr.b32 b0, b0, 4;
shr.b32 b1, b1, 4;
lop3.b32 b0, b0, 0x80008000, a0, 0xf8;
lop3.b32 b1, b1, 0x80008000, a1, 0xf8;
mul.rn.bf16x2 $0, b0, s;
mul.rn.bf16x2 $1, b1, s;
}""")


@triton.jit
def e4m3_to_bf16x4(w):
    """e4m3 codes -> bf16 by bit operations (the module's docstring says why); exact for every
    finite code, subnormals included (bf16 multiplies keep subnormal inputs)."""
    return tl.inline_asm_elementwise(
        E4M3_TO_BF16X4, "=r,=r,r", [w.to(tl.int8, bitcast=True)], dtype=tl.bfloat16, is_pure=True, pack=4
    )


@triton.jit
def _weight_only_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr, part_ptr, count_ptr, M, N, K, k_chunk, groups,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    GROUPED: tl.constexpr, SPLITS: tl.constexpr, UPCAST: tl.constexpr, E4M3_BITS: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    n_mask = offs_n < N
    m_mask = offs_m < M
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * K  # W is [N, K], rows contiguous (nn.Linear)
    x_rows = x_ptr + offs_m[:, None] * K
    k_begin = split * k_chunk
    k_end = tl.minimum(k_begin + k_chunk, K)
    out_mask = n_mask[:, None] & m_mask[None, :]
    if not GROUPED:
        # Loaded before the stream, not after it: a DRAM round trip off the kernel's critical path.
        scale = tl.load(s_ptr + offs_n, mask=n_mask, other=0.0)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)  # y^T tile: W rows x x rows
    for k0 in range(k_begin, k_end, BLOCK_K):
        cols = k0 + offs_k
        if EVEN_K:
            w = tl.load(w_rows + cols[None, :], mask=n_mask[:, None], other=0.0)
            x = tl.load(x_rows + cols[None, :], mask=m_mask[:, None], other=0.0)
        else:
            w = tl.load(w_rows + cols[None, :], mask=n_mask[:, None] & (cols < K)[None, :], other=0.0)
            x = tl.load(x_rows + cols[None, :], mask=m_mask[:, None] & (cols < K)[None, :], other=0.0)
        if UPCAST:  # the CPU interpreter multiplies bf16 dot operands as raw bit patterns
            w, x = w.to(tl.float32), x.to(tl.float32)
        elif E4M3_BITS:
            w = e4m3_to_bf16x4(w)
        else:
            w = w.to(tl.bfloat16)  # exact for int8 and e4m3 codes
        if GROUPED:
            # The step is one group (or part of one): its partial product takes that group's scale.
            s = tl.load(s_ptr + offs_n * groups + k0 // (K // groups), mask=n_mask, other=0.0)
            acc += tl.dot(w, tl.trans(x)) * s[:, None]
        else:
            acc = tl.dot(w, tl.trans(x), acc)
    if not GROUPED:
        acc = acc * scale[:, None]  # one scale per row of W: it commutes with the K sum
    last = True
    if SPLITS > 1:
        part = part_ptr + offs_n[:, None] * BLOCK_M + offs_m[None, :]
        tl.store(part + split * N * BLOCK_M, acc, mask=out_mask)
        last = last_to_arrive(count_ptr, pid_n, SPLITS)
        if last:
            acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
            for s_index in range(SPLITS):  # a fixed order: the sum does not depend on who finished first
                acc += tl.load(part + s_index * N * BLOCK_M, mask=out_mask, other=0.0, cache_modifier=".cg")
            rearm(count_ptr, pid_n)
    if last:
        tl.store(y_ptr + offs_m[None, :] * N + offs_n[:, None], acc.to(y_ptr.dtype.element_ty), mask=out_mask)


def _has_bf16x2_multiply(device) -> bool:
    """mul.rn.bf16x2, which the e4m3 bit dequantization ends with, is an sm_90 instruction."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (9, 0)


def weight_only_linear(
    x, w_q, w_scale, group: int = 0, out: torch.Tensor | None = None,
    tile: StreamTile | None = None, splits: int | None = None, e4m3_bits: bool = True,
) -> torch.Tensor:  # fmt: skip
    """bf16 x [M <= 16, K] @ (w_q * w_scale)^T for int8 or fp8 codes w_q [N, K] and fp32 scales
    [N, 1] (per channel) or [N, K / group] (per group). ``tile`` and ``splits`` override plan();
    ``e4m3_bits=False`` dequantizes fp8 with Triton's cast instead of the bit operations."""
    m, k = x.shape
    n = w_q.shape[0]
    if m > MAX_ROWS:
        raise ValueError(f"weight_only_linear takes at most {MAX_ROWS} rows, not {m}")
    x, w_q, w_scale = x.contiguous(), w_q.contiguous(), w_scale.contiguous()
    out = torch.empty((m, n), dtype=x.dtype, device=x.device) if out is None else out
    tile, splits = plan(n, k, m, group, sm_count(x.device, INTERPRETER_SMS), tile, splits)
    k_chunk = triton.cdiv(triton.cdiv(k, splits), tile.block_k) * tile.block_k  # whole K steps per split
    splits = triton.cdiv(k, k_chunk)
    tiles = triton.cdiv(n, tile.block_n)
    part, count = _workspace(x.device, n, splits, tiles) if splits > 1 else (out, out)
    _weight_only_kernel[(tiles, splits)](
        x, w_q, w_scale, out, part, count, m, n, k, k_chunk, k // group if group else 1,
        BLOCK_M=MAX_ROWS, BLOCK_N=tile.block_n, BLOCK_K=tile.block_k, EVEN_K=k % tile.block_k == 0,
        GROUPED=bool(group), SPLITS=splits, UPCAST=interpreting(),
        E4M3_BITS=e4m3_bits and w_q.dtype == torch.float8_e4m3fn and _has_bf16x2_multiply(x.device),
        num_warps=tile.warps, num_stages=tile.stages,
    )  # fmt: skip
    return out


# What `rooflint ab --config` may set (docs/ab.md); None keeps plan()'s choice from the shape.
# BLOCK_N: W rows a program (a power of 2, >= 16; num_warps defaults to BLOCK_N / 16, at most 2);
# BLOCK_K: codes a row a K step; SPLITS: K splits (1: none); E4M3_BITS: 0 dequantizes fp8 with
# Triton's cast (the conversion unit), 1 with bit operations.
TRITON_CONFIG = MappingProxyType(
    {"BLOCK_N": None, "BLOCK_K": None, "num_stages": None, "num_warps": None, "SPLITS": None, "E4M3_BITS": 1}
)


def configured_tile(n: int, k: int, m: int, sms: int, config) -> StreamTile | None:
    """The tile ``config`` asks for, its unset fields from plan()'s; None when it sets none."""
    fields = ("BLOCK_N", "BLOCK_K", "num_stages", "num_warps")
    if all(config[name] is None for name in fields):
        return None
    base, _ = plan(n, k, m, 0, sms)
    block_n = config["BLOCK_N"] or base.block_n
    warps = config["num_warps"] or min(2, max(1, block_n // MMA_ROWS))
    return StreamTile(block_n, config["BLOCK_K"] or base.block_k, config["num_stages"] or base.stages, warps)


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case, config=TRITON_CONFIG):
    """the 1-byte weight streamed once, dequantized in registers, bf16 MMAs, scales on the accumulator"""
    x, w_q, w_scale, group = case["x"], case["w_q"], case["w_scale"], case.params["group"]
    if w_q.dtype != torch.int8 and torch.cuda.get_device_capability(x.device) < (8, 9):
        raise VariantSkipped("Triton loads fp8 codes on sm_89 or newer")
    out = torch.empty((x.shape[0], w_q.shape[0]), dtype=x.dtype, device=x.device)
    tile = configured_tile(w_q.shape[0], x.shape[1], x.shape[0], sm_count(x.device, INTERPRETER_SMS), config)
    splits, bits = config["SPLITS"], bool(config["E4M3_BITS"])
    return lambda: weight_only_linear(x, w_q, w_scale, group, out, tile, splits, bits)


# PDL=1 launches as a model's decode step does (kernels/common/pdl.py): gelu_linear's skinny_linear
# then runs skinny_pdl.cu's CUDA kernels where the GPU has PDL and their plan takes the shape; by
# default (as bench times it) launches are plain and the Triton kernel runs. CUDA=1 forces the held
# CUDA kernel and CUDA=2 the streamed one (skinny_pdl.py), under PDL.
BF16_SKINNY_CONFIG = MappingProxyType({"PDL": None, "CUDA": None})
CUDA_KERNELS = {1: False, 2: True}  # CUDA=... -> skinny_pdl.launch's streamed


@FAMILY.variant(
    "bf16_skinny",
    kind="triton",
    needs=(NEEDS_CUDA, NEEDS_TRITON),
    modeled_bytes=bf16_weight_bytes,
    sources=(SKINNY_PDL_CU, SKINNY_RING_CU),
)
def bf16_skinny(case, config=BF16_SKINNY_CONFIG):
    """gelu_linear's bf16 skinny decode GEMM on the bf16 weight: what the 1-byte weights must beat"""
    x, w = case["x"], case["w_bf16"]
    out = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
    if config["CUDA"] is not None:
        if config["CUDA"] not in CUDA_KERNELS:
            raise ValueError(f"CUDA={config['CUDA']}: 1 (the held kernel) or 2 (the streamed one)")
        streamed = CUDA_KERNELS[config["CUDA"]]
        try:
            skinny_pdl.forced(x.shape[1], x.shape[0], streamed)  # refused here, at build, not at a launch
        except ValueError as why:
            raise ValueError(f"{why}: try CUDA={3 - config['CUDA']}") from None
        return lambda: skinny_pdl.launch(x, w, None, False, None, out, None, None, streamed=streamed)
    if config["PDL"]:

        def in_chain():
            with decode_chain():
                return skinny_linear(x, w, out=out)

        return in_chain
    return lambda: skinny_linear(x, w, out=out)
