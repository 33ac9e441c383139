"""Launch parameters of GPT-2's decode kernels, each timed the way a decode step runs it (issue 12).

Each point is one CUDA graph of 12 calls, one per layer, each over its own copy of the weights or
cache (12 layers' weights, 56 MB for the MLP, do not fit the 50 MB L2, as in the model), timed
by the bench's burst timer (L2 flushed); the figure is the graph's time / 12: a kernel's cost in
a chain of kernels, launch and ramp included. Sweeps the skinny GEMM's tile and K split at the
four projections of a decode step (M = 8) beside cuBLAS, and the paged decode attention's tile,
stages, warps and cache splits at B = 8, H = 12, D = 64, context 576.
  python3 scripts/device/decode_sweep.py [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from rooflint.engine.timing import time_cuda
from rooflint.kernels import _gemm_skinny as skinny
from rooflint.kernels import decode_attention as da
from rooflint.models.cache import KVCache

LAYERS = 12
L2 = torch.cuda.get_device_properties(0).L2_cache_size


def graph_us(calls) -> float:
    """Device time of one call of a chain of ``calls`` (one graph, replayed), in us."""
    for call in calls:  # compile, allocate workspaces
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    t = time_cuda(graph.replay, l2_bytes=L2, warmup_ms=5, rep_ms=40)
    return t.median_ms * 1e3 / len(calls)


def gemm_sweep(quick: bool, old=None) -> None:
    m, d = 8, 768
    shapes = {  # name: (N, K, kind)
        "qkv (norm)": (3 * d, d, "norm"),
        "out_proj (+res)": (d, d, "res"),
        "mlp_up (norm, gelu)": (4 * d, d, "norm_gelu"),
        "mlp_down (+res)": (d, 4 * d, "res"),
    }
    tiles = [
        skinny.SkinnyTile(16, 128, 4, 4), skinny.SkinnyTile(16, 256, 4, 4), skinny.SkinnyTile(16, 256, 3, 2),
        skinny.SkinnyTile(32, 128, 4, 4), skinny.SkinnyTile(32, 256, 4, 4), skinny.SkinnyTile(64, 128, 4, 4),
        skinny.SkinnyTile(16, 512, 3, 4),
    ]  # fmt: skip
    if quick:
        tiles = tiles[:2]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for label, (n, k, kind) in shapes.items():
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(LAYERS)]
        bs = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(LAYERS)]
        lw = torch.randn(k, device="cuda", dtype=torch.bfloat16)
        folded = [skinny.fold_layer_norm(lw, lw, w, b) for w, b in zip(ws, bs)]
        r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(LAYERS)]
        bytes_ = n * k * 2
        floor = bytes_ / 3.35e12 * 1e6
        tile0 = skinny.choose_tile(n, sms)
        print(f"\n== {label}: N={n} K={k}, {bytes_ / 1e6:.2f} MB of W, HBM floor {floor:.2f} us; "
              f"default {tile0.label} splits {skinny.choose_splits(n, k, tile0, sms)}")  # fmt: skip
        base = graph_us([partial(F.linear, x, ws[i], bs[i]) for i in range(LAYERS)])
        print(f"   cuBLAS F.linear(+bias) {base:7.2f} us  ({bytes_ / base / 1e3:.0f} GB/s)")
        for module, tag in ((old, "old"), (skinny, "new")):
            if module is None:
                continue
            if kind.startswith("norm"):
                fl = [module.fold_layer_norm(lw, lw, w, b) for w, b in zip(ws, bs)]
                calls = [partial(module.skinny_norm_linear, x, fl[i], 1e-5, gelu=kind == "norm_gelu", out=outs[i])
                         for i in range(LAYERS)]  # fmt: skip
            else:
                calls = [partial(module.skinny_linear, x, ws[i], bs[i], residual=r, out=outs[i]) for i in range(LAYERS)]
            us = graph_us(calls)
            print(f"   {tag} kernel, default launch: {us:7.2f} us  ({bytes_ / us / 1e3:.0f} GB/s)")
        for tile in tiles:
            splits_options = [1] if kind.startswith("norm") else [1, 2, 3, 4, 6]
            for splits in splits_options:
                if kind.startswith("norm"):
                    calls = [partial(skinny.skinny_norm_linear, x, folded[i], 1e-5, gelu=kind == "norm_gelu",
                                     out=outs[i], tile=tile) for i in range(LAYERS)]  # fmt: skip
                else:
                    calls = [partial(skinny.skinny_linear, x, ws[i], bs[i], residual=r, out=outs[i], tile=tile,
                                     splits=splits) for i in range(LAYERS)]  # fmt: skip
                try:
                    us = graph_us(calls)
                except Exception as error:  # a tile that does not fit (shared memory): say so, go on
                    print(f"   {tile.label:<16} splits {splits}: {type(error).__name__}: {str(error)[:80]}")
                    continue
                print(f"   {tile.label:<16} splits {splits}: {us:7.2f} us  ({bytes_ / us / 1e3:.0f} GB/s)")


def attention_sweep(quick: bool) -> None:
    b, h, d, length = 8, 12, 64, 576
    cache = KVCache(LAYERS, b, h, d, 640, torch.bfloat16, torch.device("cuda"))
    for pool in cache.k + cache.v:
        pool.normal_()
    q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16)
    kv_bytes = 2 * b * h * length * d * 2
    print(f"\n== paged decode attention B={b} H={h} D={d} context {length}: "
          f"{kv_bytes / 1e6:.2f} MB of cache per layer, HBM floor {kv_bytes / 3.35e12 * 1e6:.2f} us")  # fmt: skip
    ref = da.DecodeWorkspace(q, h, length)
    print(f"   default: splits {ref.splits} chunk {ref.chunk}")
    blocks, stages, warps = ((32, 64, 128), (2, 3, 4), (2, 4)) if not quick else ((64,), (3,), (4,))
    for split_count in sorted({ref.splits, 2, 3, 9, 12}):
        for block_n, st, w in itertools.product(blocks, stages, warps):
            chunk = -(-length // split_count)
            chunk = -(-chunk // block_n) * block_n
            spaces = []
            for _ in range(LAYERS):
                ws = da.DecodeWorkspace(q, h, length)
                ws.splits, ws.chunk = -(-length // chunk), chunk
                ws.part_acc = torch.empty((b * h, ws.splits, d), dtype=torch.float32, device="cuda")
                ws.part_ml = torch.empty((b * h, ws.splits, 2), dtype=torch.float32, device="cuda")
                spaces.append(ws)
            calls = [partial(da.triton_paged_decode, q, cache.k[i], cache.v[i], cache.block_table, h, length,
                             spaces[i], block_n, st, w) for i in range(LAYERS)]  # fmt: skip
            try:
                us = graph_us(calls)
            except Exception as error:
                print(f"   splits {spaces[0].splits:>2} block {block_n:>3} s{st} w{w}: {type(error).__name__}")
                continue
            print(f"   splits {spaces[0].splits:>2} chunk {chunk:>3} block {block_n:>3} s{st} w{w}: {us:7.2f} us "
                  f"({kv_bytes / us / 1e3:.0f} GB/s)")  # fmt: skip


def argmax_sweep() -> None:
    logits = torch.randn(8, 50257, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(8, 1, dtype=torch.long, device="cuda")
    us = graph_us([lambda: out.copy_(logits.argmax(-1, keepdim=True)) for _ in range(LAYERS)])
    print(f"\n== torch argmax over [8, 50257] bf16 + copy: {us:.2f} us")
    from rooflint.kernels import _sample

    tokens = torch.empty(8, 128, dtype=torch.long, device="cuda")
    ws = _sample.GreedyWorkspace(8, 50257, logits.device)
    us = graph_us([partial(_sample.greedy_argmax, logits, tokens[:, 3:4], out, ws) for _ in range(LAYERS)])
    print(
        f"== rooflint greedy_argmax (one kernel, both outputs): {us:.2f} us; "
        f"matches torch: {torch.equal(out[:, 0], logits.argmax(-1))}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="gemm,attention,argmax")
    parser.add_argument("--old", default=None, help="an earlier _gemm_skinny.py to time beside this one")
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), torch.cuda.get_device_properties(0).multi_processor_count, "SMs")
    if "gemm" in args.only:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from side_by_side import load_module

        gemm_sweep(args.quick, load_module(args.old, "skinny_old") if args.old else None)
    if "attention" in args.only:
        attention_sweep(args.quick)
    if "argmax" in args.only:
        argmax_sweep()


if __name__ == "__main__":
    main()
