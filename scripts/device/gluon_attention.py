"""The Gluon attention forward for Hopper, side by side: the first version (below: both consumer
warpgroups in lockstep, a CTA barrier each tile to refill the ring) and the product's warp-specialized
one (rooflint.kernels._attention_gluon, the `triton_gluon` variant), beside cuDNN and `triton_hopper`.

Why Gluon: Triton 3.6's compiler admits one loop shape for warp specialization and does not compile
the overlap FlashAttention-3 gets within a warpgroup (docs/perf-notes/kernels-at-limit.md, "The
round at b84ba15"). Gluon states the schedule itself:
- Q once, K and V through a STAGES-deep TMA ring, each stage with its own mbarrier;
- 128 query rows on 8 warps (two warpgroups of wgmma m64), 128-key tiles;
- the next tile's S = Q K^T is issued (asynchronous wgmma) before this tile's P V, and the wait
  leaves P V in flight while the softmax of the next tile runs: tensor cores and the FMA/MUFU
  pipes overlap within each warpgroup;
- the mask only on tiles that need it (the ragged last tile, the causal diagonal).

Gluon has no CPU interpreter: each kernel is checked against float64 on the GPU before it is timed:

    python3 scripts/device/gluon_attention.py            # on the GPU; writes gluon.csv under $OUT
"""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from rooflint.kernels import _attention_gluon
from rooflint.kernels._attention_gluon import LOG2E, _softmax_tile


@gluon.jit
def _issue(desc, ring, bars, row0, tile, n_tiles, STAGES: gl.constexpr):
    """TMA of key (or value) tile `tile` into its ring stage; nothing past the last tile."""
    stage = tile % STAGES
    live = tile < n_tiles
    mbarrier.expect(bars.index(stage), desc.block_type.nbytes, pred=live)
    tma.async_copy_global_to_shared(desc, [row0 + tile * desc.block_type.shape[0], 0], bars.index(stage),
                                    ring.index(stage), live)  # fmt: skip


@gluon.jit
def _attn_fwd(q_desc, k_desc, v_desc, o_ptr, n, qk_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr,
              num_warps: gl.constexpr):  # fmt: skip
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    D: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, D, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)

    num_m = gl.cdiv(n, BLOCK_M)
    if CAUSAL:
        start_m = num_m - 1 - gl.program_id(0)  # longest rows first
    else:
        start_m = gl.program_id(0)
    row0 = gl.program_id(1) * n  # this head's first row in the [B*H*N, D] views
    offs_m = start_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=row_layout)
    if CAUSAL:
        hi = gl.minimum((start_m + 1) * BLOCK_M, n)
        mask_from = gl.minimum(start_m * BLOCK_M, n) // BLOCK_N  # the diagonal tile on
    else:
        hi = n
        mask_from = n // BLOCK_N  # only a ragged last tile
    n_tiles = gl.cdiv(hi, BLOCK_N)

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(k_bars.index(s), count=1)
        mbarrier.init(v_bars.index(s), count=1)

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [row0 + start_m * BLOCK_M, 0], q_bar, q_smem)
    for s in gl.static_range(STAGES):
        _issue(k_desc, k_smem, k_bars, row0, s, n_tiles, STAGES)
        _issue(v_desc, v_smem, v_bars, row0, s, n_tiles, STAGES)

    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=row_layout)
    l_i = gl.zeros([BLOCK_M], gl.float32, layout=row_layout)
    acc = gl.zeros([BLOCK_M, D], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)

    # Tile 0: its scores and softmax, nothing to overlap with yet.
    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_bars.index(0), 0)
    s_tok = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=(s_tok,))
    if mask_from == 0:
        p, m_i, l_i, alpha = _softmax_tile(s, m_i, l_i, 0, offs_m, n, qk_scale, BLOCK_N, True, CAUSAL, col_layout)
    else:
        p, m_i, l_i, alpha = _softmax_tile(s, m_i, l_i, 0, offs_m, n, qk_scale, BLOCK_N, False, CAUSAL, col_layout)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    # K's stage is free once every warp's S is done: refill it now, a whole tile ahead of its use.
    gl.thread_barrier()
    _issue(k_desc, k_smem, k_bars, row0, STAGES, n_tiles, STAGES)

    for tile in range(1, n_tiles):
        stage = tile % STAGES
        prev = (tile - 1) % STAGES
        # S of this tile, then P V of the previous one: both asynchronous, in that order.
        mbarrier.wait(k_bars.index(stage), (tile // STAGES) & 1)
        s_tok = warpgroup_mma(q_smem, k_smem.index(stage).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        mbarrier.wait(v_bars.index(prev), ((tile - 1) // STAGES) & 1)
        acc_tok = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
        # S is done once at most one group (P V) is in flight: its softmax runs under P V.
        s = warpgroup_mma_wait(1, deps=(s_tok,))
        if tile >= mask_from:
            p, m_new, l_i, alpha = _softmax_tile(
                s, m_i, l_i, tile, offs_m, n, qk_scale, BLOCK_N, True, CAUSAL, col_layout
            )
        else:
            p, m_new, l_i, alpha = _softmax_tile(
                s, m_i, l_i, tile, offs_m, n, qk_scale, BLOCK_N, False, CAUSAL, col_layout
            )
        m_i = m_new
        acc = warpgroup_mma_wait(0, deps=(acc_tok,))
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        # Every warp is past its reads of this tile's K (its S) and the previous tile's V (its P V):
        # refill both stages, K a whole tile and V half a tile ahead of their use. (One refill per
        # tile for both, after the P V wait, left each K load exposed: issued one step before use.)
        gl.thread_barrier()
        _issue(k_desc, k_smem, k_bars, row0, tile + STAGES, n_tiles, STAGES)
        _issue(v_desc, v_smem, v_bars, row0, tile - 1 + STAGES, n_tiles, STAGES)

    last = (n_tiles - 1) % STAGES
    mbarrier.wait(v_bars.index(last), ((n_tiles - 1) // STAGES) & 1)
    acc_tok = warpgroup_mma(p_op, v_smem.index(last), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=(acc_tok,))

    mbarrier.invalidate(q_bar)
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(k_bars.index(s))
        mbarrier.invalidate(v_bars.index(s))

    out = acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 1)
    store_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    out = gl.convert_layout(out.to(dtype), store_layout)
    rows = start_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, store_layout))
    dims = gl.arange(0, D, layout=gl.SliceLayout(0, store_layout))
    offsets = gl.expand_dims((row0 + rows).to(gl.int64) * D, 1) + gl.expand_dims(dims, 0)
    gl.store(o_ptr + offsets, out, mask=gl.expand_dims(rows < n, 1))


def prepare(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, ws: bool = False):
    """``ws``: the product's warp-specialized kernel (rooflint.kernels._attention_gluon, `triton_gluon`);
    else the first version above, both warpgroups in lockstep, kept to measure the difference."""
    if ws:
        return _attention_gluon.prepare(q, k, v, causal)
    b, h, n, d = q.shape
    rows = b * h * n
    dtype = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16
    layout = gl.NVMMASharedLayout.get_default_for([128, d], dtype)
    q_desc, k_desc, v_desc = (TensorDescriptor(t.view(rows, d), [rows, d], [d, 1], [128, d], layout) for t in (q, k, v))
    out = torch.empty_like(q)
    grid = (math.ceil(n / 128), b * h)
    scale = LOG2E / math.sqrt(d)

    def run() -> torch.Tensor:
        _attn_fwd[grid](q_desc, k_desc, v_desc, out, n, scale, causal, 2, num_warps=8)
        return out

    return run


def main() -> None:
    import functools
    import sys

    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from side_by_side import time_rounds, write_rows

    from rooflint.core.registry import get_family
    from rooflint.engine.correctness import check
    from rooflint.kernels import _attention_hopper as ah

    out_dir = Path(os.environ.get("OUT", "/tmp/gluon-attention"))
    out_dir.mkdir(parents=True, exist_ok=True)
    family = get_family("attention")
    rows = []
    for ws in (False, True):
        for n, causal, dtype in ((777, False, "bf16"), (777, True, "bf16"), (1024, True, "fp16"), (130, False, "fp16")):
            params = {"B": 2, "H": 3, "N": n, "D": 128, "causal": causal}
            case = family.build_case("custom", params, dtype, torch.device("cuda"), seed=n)
            out = prepare(case["q"], case["k"], case["v"], causal, ws=ws)()
            verdict = check(family, dtype, out, family.reference(case.inputs, params))
            status = "ok" if verdict.passed else verdict.message
            name = f"check {'ws ' if ws else ''}N={n} causal={causal} {dtype}"
            rows.append({"shape": name, "status": status, "rel_err": verdict.error})
            print(rows[-1], flush=True)
            if not verdict.passed:
                write_rows(out_dir / "gluon.csv", rows)
                raise SystemExit(f"gluon attention wrong: {name}: {verdict.message}")
        if ws:  # 20 calls, identical bits: no consumer reads a stage the producer refills
            case = family.build_case("custom", {"B": 4, "H": 8, "N": 2048, "D": 128, "causal": False}, "bf16",
                                     torch.device("cuda"), seed=5)  # fmt: skip
            run = prepare(case["q"], case["k"], case["v"], False, ws=True)
            first = run().clone()
            same = all(torch.equal(run(), first) for _ in range(20))
            rows.append({"shape": "ws repeatable over 20 calls", "status": "ok" if same else "differs"})
            print(rows[-1], flush=True)
    for b, h, n, causal in ((4, 32, 4096, False), (4, 32, 4096, True), (1, 32, 16384, True)):
        q, k, v = (torch.randn(b, h, n, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        entries = {
            "cudnn": functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal),
            "triton_hopper": ah.prepare(q, k, v, causal),
            "gluon": prepare(q, k, v, causal),
            "gluon_ws": prepare(q, k, v, causal, ws=True),
        }
        times = time_rounds(entries, 5, lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION))
        flops = 4 * b * h * n * n * 128 / (2 if causal else 1)
        med = {key: statistics.median(value) for key, value in times.items()}
        row = {"shape": f"B{b} H{h} N{n} D128" + (" causal" if causal else ""), "status": "ok"}
        for key, ms in med.items():
            row[f"{key}_tflops"] = flops / ms / 1e9
        row["gluon_x_cudnn"] = med["cudnn"] / med["gluon"]
        row["gluon_ws_x_cudnn"] = med["cudnn"] / med["gluon_ws"]
        row["triton_hopper_x_cudnn"] = med["cudnn"] / med["triton_hopper"]
        rows.append(row)
        print(row, flush=True)
    write_rows(out_dir / "gluon.csv", rows)


if __name__ == "__main__":
    main()
