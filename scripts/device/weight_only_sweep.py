"""weight_only_gemm's Triton stream at the decode shapes, beside the bf16 skinny kernel and the
earlier kernel's tile, in one process and alternating rounds (run by weight_only_sweep.sh).

Every entry is checked against float64 first (engine.correctness), then timed by the bench's burst
timer (engine.timer: L2 flushed, a spin kernel ahead of each call); a round times every entry of
every shape once, so clock drift hits all entries alike. Also times a one-kernel call that reads
nothing (a 16-element zero_): the floor every call pays in this timer, launch to completion.
Writes sweep.csv (one row per entry, shape, round) and prints the summary.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd
import torch

from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.engine.timer import measure
from rooflint.kernels.gelu_linear.skinny import skinny_linear
from rooflint.kernels.weight_only_gemm import triton as stream

CUDA = torch.device("cuda")
SHAPES = [  # (m, k, n, group): GPT-2 and Llama-3.2-1B decode linears, and Llama-3-8B's MLP up (58.7 MB int8)
    (1, 768, 2304, 0), (1, 3072, 768, 0), (1, 2048, 2048, 0), (1, 2048, 8192, 0), (1, 8192, 2048, 0),
    (8, 2048, 8192, 0), (16, 8192, 2048, 0), (8, 2048, 8192, 128), (1, 4096, 14336, 0),
]  # fmt: skip
OLD_TILES = (stream.StreamTile(32, 256, 4, 4), stream.StreamTile(16, 256, 4, 4))


def old_plan(n: int, k: int, sms: int):
    """The tile and splits of the kernel before this one (4 warps on 32 rows, K split in at most 4)."""
    tile = next((t for t in OLD_TILES if 2 * -(-n // t.block_n) >= sms), OLD_TILES[-1])
    splits = max(1, min(-(-k // 1024), 4, -(-k // tile.block_k))) if -(-n // tile.block_n) < sms else 1
    return tile, splits


def entries(case, dtype: str, sms: int):
    x, w_q, s, group = case["x"], case["w_q"], case["w_scale"], case.params["group"]
    m, k, n = x.shape[0], x.shape[1], w_q.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=CUDA)
    w16 = case["w_bf16"]
    old_tile, old_splits = old_plan(n, k, sms)
    yield "bf16_skinny", lambda: skinny_linear(x, w16, out=out)
    yield "old_tile", lambda: stream.weight_only_linear(x, w_q, s, group, out, old_tile, old_splits, False)
    yield "new", lambda: stream.weight_only_linear(x, w_q, s, group, out)
    if dtype == "wfp8a16":
        yield "new_cast_fp8", lambda: stream.weight_only_linear(x, w_q, s, group, out, e4m3_bits=False)
    for label, tile in (("n64", stream.StreamTile(64, 256, 3, 2)), ("n16", stream.StreamTile(16, 256, 3, 1)),
                        ("n32_k128_s4", stream.StreamTile(32, 128, 4, 2))):  # fmt: skip
        yield label, lambda tile=tile: stream.weight_only_linear(x, w_q, s, group, out, tile)
    yield "new_nosplit", lambda: stream.weight_only_linear(x, w_q, s, group, out, splits=1)


def main(out_dir: Path, rounds: int) -> None:
    family = get_family("weight_only_gemm")
    props = torch.cuda.get_device_properties(CUDA)
    sms, l2 = props.multi_processor_count, props.L2_cache_size
    print(f"GPU {props.name}, {sms} SMs; torch {torch.__version__}")
    runs = []  # (dtype, shape, label, fn, bytes of W)
    for dtype in ("w8a16", "wfp8a16"):
        for m, k, n, group in SHAPES:
            params = {"m": m, "k": k, "n": n, "group": group}
            case = family.build_case("custom", params, dtype, CUDA, seed=m + n)
            reference = family.reference(case.inputs, params)
            shape = f"m={m},k={k},n={n},group={group}"
            for label, fn in entries(case, dtype, sms):
                try:
                    verdict = check(family, dtype, fn(), reference)
                except Exception as error:  # a config the kernel cannot compile: reported, not timed
                    print(f"FAILED {dtype} {shape} {label}: {type(error).__name__}: {str(error)[:200]}")
                    continue
                if not verdict.passed:
                    print(f"WRONG {dtype} {shape} {label}: {verdict.message}")
                    continue
                runs.append((dtype, shape, label, fn, n * k))
            print(f"checked {dtype} {shape}", flush=True)
    floor_buffer = torch.empty(16, device=CUDA)
    runs.append(("-", "one small kernel", "zero_16", floor_buffer.zero_, 0))
    rows = []
    began = time.time()
    for r in range(rounds):
        order = runs[r % len(runs) :] + runs[: r % len(runs)]  # rotate: no entry always first
        for dtype, shape, label, fn, w_codes in order:
            timing = measure(fn, device="cuda", regime="burst", l2_bytes=l2)
            rows.append({"dtype": dtype, "shape": shape, "entry": label, "round": r,
                         "us": timing.median_ms * 1e3, "w_codes": w_codes})  # fmt: skip
        pd.DataFrame(rows).to_csv(out_dir / "sweep.csv", index=False)  # a timeout still leaves whole rounds
        print(f"round {r} done at {time.time() - began:.0f} s", flush=True)
    summarize(pd.DataFrame(rows))


def summarize(table: pd.DataFrame) -> None:
    us = table.groupby(["dtype", "shape", "entry"], sort=False).us.median().unstack("entry")
    floor = us.loc[("-", "one small kernel"), "zero_16"]
    print(f"\nper-call floor of this timer (one kernel, no bytes): {floor:.2f} us")
    print("us per call (median over rounds); xS = bf16_skinny's time / this entry's")
    for (dtype, shape), row in us.drop(index=("-", "one small kernel")).iterrows():
        cells = [f"{entry} {t:.2f} (x{row['bf16_skinny'] / t:.2f})" for entry, t in row.dropna().items()]
        best = row.drop("bf16_skinny").idxmin()
        print(f"  {dtype:8} {shape:30} {', '.join(cells)}  best: {best}")
    skinny = table[(table.entry == "bf16_skinny") & table["shape"].str.startswith("m=1,") & (table.dtype == "w8a16")]
    fit = skinny.groupby("shape").agg(us=("us", "median"), mb=("w_codes", "first"))
    fit["mb"] = fit.mb * 2 / 1e6  # the bf16 weight's bytes
    if len(fit) >= 3:
        slope = fit.us.cov(fit.mb) / fit.mb.var()
        intercept = fit.us.mean() - slope * fit.mb.mean()
        print(f"bf16_skinny at m=1: time = {intercept:.2f} us + bytes / {1 / slope:.2f} TB/s (least squares over "
              f"{len(fit)} shapes): the intercept is the per-call cost a 1-byte weight cannot halve")  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 2)
