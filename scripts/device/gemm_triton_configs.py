"""The wave-fitted Triton GEMM's tiles, warp-specialized ones included, each in its own child process
with a time limit (a warp-specialized Triton kernel can hang: attention_triton_configs.py). Each child
checks its entry against float64 at a ragged shape in bf16 and fp16, then times it beside cuBLASLt's
fused bias+GELU (the `eager` variant) with alternating do_bench rounds. Writes configs.csv under $OUT.

    python3 scripts/device/gemm_triton_configs.py [--set gpt2-k] [--limit-s 90] [--match ' ws'] [--shape gpt2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# (m, k, n) of `bench gelu_linear --size large`'s two compute-bound rows, and timing rounds for each.
SHAPES = {"gpt2": ((1024, 768, 3072), 7), "8192": ((8192, 8192, 8192), 3)}


def entries(name: str) -> list:
    """(shape, tile, early_bias) to try, by set: each shape's current choice first, as the baseline."""
    from rooflint.kernels._gemm_small import GemmTile

    gpt2 = GemmTile(128, 192, 64, 4, 8, 8, 1)
    square = GemmTile(128, 256, 64, 4, 8, 16, 1)
    sets = {
        # Round 12's first call: the bias before the K loop, warp specialization, a longer K step.
        "ws-bias": [
            ("gpt2", gpt2, False),
            ("gpt2", gpt2, True),
            ("gpt2", GemmTile(128, 192, 64, 4, 8, 8, 1, warp_specialize=True), True),
            ("gpt2", GemmTile(128, 192, 64, 3, 8, 8, 1, warp_specialize=True), True),
            ("gpt2", GemmTile(128, 192, 128, 2, 8, 8, 1), True),
            ("gpt2", GemmTile(128, 128, 64, 3, 8, 8, 2), True),
            ("8192", square, False),
            ("8192", square, True),
            ("8192", GemmTile(128, 256, 64, 3, 8, 16, 1, warp_specialize=True), True),
            ("8192", GemmTile(128, 256, 64, 4, 8, 16, 1, warp_specialize=True), True),
        ],
        # The second: with the bias early, shorter K steps in more stages and the raster's group.
        "gpt2-k": [
            ("gpt2", gpt2, True),
            ("gpt2", gpt2, False),
            ("gpt2", GemmTile(128, 192, 32, 8, 8, 8, 1), True),
            ("gpt2", GemmTile(128, 192, 32, 6, 8, 8, 1), True),
            ("gpt2", GemmTile(128, 192, 64, 4, 8, 4, 1), True),
            ("gpt2", GemmTile(128, 192, 64, 4, 8, 1, 1), True),
            ("gpt2", GemmTile(128, 192, 64, 3, 8, 8, 1), True),
        ],
        # The third: a fifth stage (40 KB more shared memory), with each raster.
        "gpt2-s5": [
            ("gpt2", gpt2, True),
            ("gpt2", GemmTile(128, 192, 64, 5, 8, 8, 1), True),
            ("gpt2", GemmTile(128, 192, 64, 5, 8, 1, 1), True),
            ("gpt2", GemmTile(128, 192, 64, 4, 8, 1, 1), True),
            ("gpt2", gpt2, True),
        ],
    }
    return sets[name]


def label(tile, early_bias: bool) -> str:
    return tile.label + (" early-bias" if early_bias else "")


def child(name: str, index: int) -> None:
    """Runs one entry of a set; prints one JSON line."""
    import statistics

    import torch
    from side_by_side import check_entries, time_rounds

    from rooflint.core.registry import get_family
    from rooflint.kernels import _gemm_small as gs

    shape, tile, early = entries(name)[index]
    family = get_family("gelu_linear")
    started = time.time()
    checks = {}
    for dtype in ("bf16", "fp16"):
        params = {"m": 1000, "k": 776, "n": 3000}
        case = family.build_case("custom", params, dtype, torch.device("cuda"), seed=7)
        run = gs.prepare(case["x"], case["w"], case["b"], tile=tile, early_bias=early)
        where = f"{label(tile, early)} {dtype}"
        checks[dtype] = check_entries(family, dtype, {where: run}, family.reference(case.inputs, params))[where]
    compile_s = time.time() - started
    (m, k, n), rounds = SHAPES[shape]
    params = {"m": m, "k": k, "n": n}
    case = family.build_case("custom", params, "bf16", torch.device("cuda"), seed=11)
    timed = {
        "cublaslt": family.variants["eager"].build(case),
        "ours": gs.prepare(case["x"], case["w"], case["b"], tile=tile, early_bias=early),
    }
    times = time_rounds(timed, rounds)
    peer, ours = (statistics.median(times[key]) for key in timed)
    flops = 2.0 * m * n * k
    row = {
        "shape": shape, "config": label(tile, early), "status": "ok", "ms": ours, "tflops": flops / ours / 1e9,
        "cublaslt_ms": peer, "x_cublaslt": peer / ours, "rounds_ours": times["ours"], "rounds_peer": times["cublaslt"],
        "check_bf16": checks["bf16"], "check_fp16": checks["fp16"], "first_call_s": round(compile_s, 1),
    }  # fmt: skip
    print("ROW " + json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit-s", type=float, default=90.0, help="time limit per entry")
    parser.add_argument("--match", default="", help="only the entries whose label contains this")
    parser.add_argument("--shape", default="", help="only this shape (gpt2 or 8192)")
    parser.add_argument("--set", default="gpt2-k", help="which entries (see entries())")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.set, args.child)
        return
    from side_by_side import run_child, write_rows

    out_dir = Path(os.environ.get("OUT", "/tmp/gemm-configs"))
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for index, (shape, tile, early) in enumerate(entries(args.set)):
        name = label(tile, early)
        if args.match not in name or args.shape not in ("", shape):
            continue
        command = [sys.executable, __file__, "--set", args.set, "--child", str(index)]
        rows += run_child(command, args.limit_s, {"shape": shape, "config": name})
    write_rows(out_dir / "configs.csv", rows)


if __name__ == "__main__":
    main()
