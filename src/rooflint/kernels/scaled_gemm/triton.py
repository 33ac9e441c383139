"""scaled_gemm: a Triton fp8/int8 GEMM, TMA loads into wgmma on Hopper, the scales in the epilogue.

The codes go to tl.dot as they are (fp8 x fp8 -> fp32, int8 x int8 -> int32 on the tensor cores:
Hopper's k=32 wgmma, twice the bf16 rate); per tensor or row, the scales touch only the fp32
accumulator, once per output, so the K loop is the same as an unscaled GEMM's. Per block (A per
1 x 128, B per 128 x 128), each K step's product is taken apart from the accumulator and added to
it times its block's sa * sb: BLOCK_K divides 128, so a step never straddles two blocks. Persistent
over a grouped tile order, as kernels/gelu_linear/triton.py, so the next tile's TMA loads overlap
this tile's epilogue.

The GELU_BIAS epilogue (gelu_linear's fp8 rows) adds a bf16 bias to the scaled fp32 accumulator and
applies tanh-GELU before the one rounding to bf16: the bias and GELU cost registers only, never a
round trip of C through HBM. Without it the kernel compiles to exactly the plain GEMM.
"""

from __future__ import annotations

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import tl, triton
from rooflint.kernels import sm_count
from rooflint.kernels.common import autotune_picks
from rooflint.kernels.common.gelu_tanh import gelu_tanh, mufu_form
from rooflint.kernels.common.tile_order import autotuned_descriptors, gemm_configs, persistent_grid, tile_origin
from rooflint.kernels.scaled_gemm import FAMILY
from rooflint.kernels.scaled_gemm.formats import SCALE_BLOCK, require_fp8_tensor_cores

INTERPRETER_SMS = 3  # under the interpreter, 3 programs still each stride over several tiles


def _set_tma_blocks(nargs):
    # Descriptors are built before the config is chosen; each config stamps its tile shape on them.
    nargs["a_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_K"]]
    nargs["b_desc"].block_shape = [nargs["BLOCK_N"], nargs["BLOCK_K"]]
    nargs["c_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_N"]]


def _configs():
    # 1-byte codes: a K step of 128 moves as many bytes as bf16's 64. 128x256x128 in 3 stages is
    # 144 KiB of operands plus a 64 KiB bf16 C tile (one block per SM, 8 warps: two consumer
    # warpgroups of 64 rows); 128x128x128 in 4 stages fits two blocks' worth of tiles for the
    # narrower shapes (GPT-2's 1024 x 3072 has only 192 tiles of 128x128). Every BLOCK_K divides
    # SCALE_BLOCK, as block scales need.
    winners = [(128, 256, 128, 3, 8, 8), (128, 128, 128, 4, 8, 8), (128, 256, 64, 4, 8, 8)]
    names = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps", "GROUP_M")
    return gemm_configs(names, winners, _set_tma_blocks, {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2})


@triton.autotune(configs=_configs(), key=["M", "N", "K", "ROW_SCALES", "BLOCK_SCALES", "GELU_BIAS"])
@triton.jit
def _scaled_gemm_kernel(
    a_desc, b_desc, c_desc, sa_ptr, sb_ptr, bias_ptr, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_SCALES: tl.constexpr, BLOCK_SCALES: tl.constexpr, INTEGER: tl.constexpr, SCALE_BLOCK: tl.constexpr,
    GELU_BIAS: tl.constexpr, MUFU: tl.constexpr,  # GELU_BIAS: C = gelu_tanh(scaled acc + bias)
):  # fmt: skip
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    k_blocks = tl.cdiv(K, SCALE_BLOCK)  # the row length of both block-scale tensors
    if not ROW_SCALES and not BLOCK_SCALES:
        scale = tl.load(sa_ptr) * tl.load(sb_ptr)  # one product for every output
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0), flatten=True):
        off_m, off_n = tile_origin(tile, tiles_m, tiles_n, BLOCK_M, BLOCK_N, GROUP_M)
        rows = off_m + tl.arange(0, BLOCK_M)
        cols = off_n + tl.arange(0, BLOCK_N)
        if INTEGER and not BLOCK_SCALES:  # int8 MMAs accumulate exactly, in int32
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
        else:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(k_tiles):
            # The TMA unit zero-fills reads past M, N or K: zero codes add nothing to the sums.
            a = a_desc.load([off_m, kt * BLOCK_K])
            b = b_desc.load([off_n, kt * BLOCK_K])
            if BLOCK_SCALES:
                # This step's product, scaled by its K block's sa (per row) and sb (per 128 columns).
                if INTEGER:
                    part = tl.dot(a, b.T, out_dtype=tl.int32).to(tl.float32)
                else:
                    part = tl.dot(a, b.T)
                kb = (kt * BLOCK_K) // SCALE_BLOCK
                sa_k = tl.load(sa_ptr + rows * k_blocks + kb, mask=rows < M, other=0.0)
                sb_k = tl.load(sb_ptr + (cols // SCALE_BLOCK) * k_blocks + kb, mask=cols < N, other=0.0)
                acc += part * (sa_k[:, None] * sb_k[None, :])
            elif INTEGER:
                acc = tl.dot(a, b.T, acc, out_dtype=tl.int32)
            else:
                acc = tl.dot(a, b.T, acc)
        out = acc.to(tl.float32)
        if BLOCK_SCALES:
            pass  # scaled block by block in the K loop
        elif ROW_SCALES:
            sa = tl.load(sa_ptr + rows, mask=rows < M, other=0.0)
            sb = tl.load(sb_ptr + cols, mask=cols < N, other=0.0)
            out = out * sa[:, None] * sb[None, :]
        else:
            out = out * scale
        if GELU_BIAS:
            bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            out = gelu_tanh(out + bias[None, :], MUFU)
        c_desc.store([off_m, off_n], out.to(c_desc.dtype))


def scaled_gemm(
    a, b, sa, sb, out: torch.Tensor | None = None, blocks: bool = False, gelu_bias: torch.Tensor | None = None
) -> torch.Tensor:
    """bf16 (a * sa) @ (b * sb)^T for a [M, K], b [N, K] (fp8 or int8 codes, row-major) and fp32
    scales: 0-dim each, or sa [M, 1] with sb [1, N] (or [N]); with ``blocks``, sa [M, cdiv(K, 128)]
    and sb [cdiv(N, 128), cdiv(K, 128)] (formats.quantize_blocks). K and N multiples of 16 (TMA strides).
    With ``gelu_bias`` ([N], any float dtype): gelu_tanh((a * sa) @ (b * sb)^T + gelu_bias), fused."""
    m, k = a.shape
    n = b.shape[0]
    if k % 16 or n % 16:
        raise ValueError("the TMA loads need 16-byte row strides: K and N multiples of 16")
    out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device) if out is None else out
    a_desc, b_desc, c_desc = autotuned_descriptors(a, b, out)
    sms = sm_count(a.device, INTERPRETER_SMS)

    grid = persistent_grid(m, n, sms)

    sa = sa.contiguous()
    bias = sa if gelu_bias is None else gelu_bias.contiguous()  # a pointer the plain GEMM never reads
    autotune_picks.launch(
        _scaled_gemm_kernel, grid, a.device, a_desc, b_desc, c_desc, sa, sb.contiguous(), bias, m, n, k,
        ROW_SCALES=not blocks and (sa.numel() > 1 or sb.numel() > 1), BLOCK_SCALES=blocks,
        INTEGER=a.dtype == torch.int8, SCALE_BLOCK=SCALE_BLOCK,
        GELU_BIAS=gelu_bias is not None, MUFU=gelu_bias is not None and mufu_form(out.dtype),
    )  # fmt: skip
    return out


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case):
    """persistent TMA GEMM on fp8/int8 codes (wgmma on Hopper), scales in the epilogue or per K block, autotuned"""
    a, b, sa, sb = case["a"], case["b"], case["sa"], case["sb"]
    if a.shape[1] % 16 or b.shape[0] % 16:
        raise VariantSkipped("TMA needs 16-byte row strides: K and N multiples of 16")
    if a.dtype != torch.int8:
        require_fp8_tensor_cores(a.device)
    out = torch.empty((a.shape[0], b.shape[0]), dtype=torch.bfloat16, device=a.device)
    blocks = case.params["scaling"] == "block"
    return lambda: scaled_gemm(a, b, sa, sb, out, blocks)
