"""Device script for the gelu and softmax families: correctness on the GPU, then a tuning sweep.

Usage (on the H100): python3 scripts/dev/gelu_softmax.py [--out DIR] [--budget SECONDS]
1. every CUDA path and Triton path at irregular widths and every dtype against float64;
2. every registered variant at the large size (bf16) against the reference;
3. do_bench (L2 flushed, median) of the peers and of candidate configs, printed as a table.
The final numbers come from `rooflint bench gelu softmax --size large --dtype bf16`.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.gelu import cuda_gelu, triton_gelu
from rooflint.kernels.softmax import cuda_softmax, triton_softmax

START = time.time()
DEV = torch.device("cuda")
RESULTS: list[dict] = []


def elapsed() -> float:
    return time.time() - START


def verdict(family, dtype, out, ref):
    v = check(family, dtype, out, ref)
    return v.passed, v.error


def correctness_small():
    gelu, softmax = get_family("gelu"), get_family("softmax")
    failures = []
    for dtype in ("fp32", "fp16", "bf16"):
        for rows, cols in ((1, 1), (3, 1000), (5, 4097), (3, 70000), (16, 8), (64, 16384), (4, 32768)):
            params = {"rows": rows, "cols": cols}
            case = gelu.build_case("custom", params, dtype, DEV, seed=1)
            ref = gelu.reference(case.inputs, params)
            # Triton compiles per shape and dtype (slow) and is checked on CPU by the tests: here only bf16.
            outs = {"cuda": cuda_gelu(case["x"], case["bias"], 2.0)}
            if dtype == "bf16" and cols in (4097, 70000, 16384):
                outs["triton"] = triton_gelu(case["x"], case["bias"], 2.0)
            # Misaligned base pointers force the CUDA scalar path.
            xs = torch.empty(rows * cols + 1, dtype=case["x"].dtype, device=DEV)[1:].view(rows, cols)
            xs.copy_(case["x"])
            bs = torch.empty(cols + 1, dtype=case["x"].dtype, device=DEV)[1:]
            bs.copy_(case["bias"])
            outs["cuda_unaligned"] = cuda_gelu(xs, bs, 2.0)
            for name, out in outs.items():
                ok, err = verdict(gelu, dtype, out, ref)
                if not ok:
                    failures.append(f"gelu {name} {dtype} {params}: {err:.3g}")

            case = softmax.build_case("custom", params, dtype, DEV, seed=1)
            ref = softmax.reference(case.inputs, params)
            x = case["x"]
            outs = {}
            if dtype == "bf16" and cols in (4097, 70000, 16384):
                outs = {"triton": triton_softmax(x), "triton_looped": triton_softmax(x, max_fused_cols=0)}
            for mode in ("auto", "registers", "looped"):
                if mode == "registers" and cols > 32768:
                    continue
                outs[f"cuda_{mode}"] = cuda_softmax(x, mode=mode)
            xs = torch.empty(rows * cols + 1, dtype=x.dtype, device=DEV)[1:].view(rows, cols)
            xs.copy_(x)
            outs["cuda_unaligned"] = cuda_softmax(xs)
            for name, out in outs.items():
                ok, err = verdict(softmax, dtype, out, ref)
                if not ok:
                    failures.append(f"softmax {name} {dtype} {params}: {err:.3g}")
    # More row tiles than gridDim.y allows (65535 tiles of 4 rows): exercises the CUDA tile loop.
    params = {"rows": 65535 * 4 + 101, "cols": 2048}
    case = gelu.build_case("custom", params, "bf16", DEV, seed=2)
    ok, err = verdict(gelu, "bf16", cuda_gelu(case["x"], case["bias"], 2.0), gelu.reference(case.inputs, params))
    if not ok:
        failures.append(f"gelu cuda bf16 {params}: {err:.3g}")
    del case
    torch.cuda.synchronize()
    print(f"[{elapsed():.0f}s] small-shape correctness: {len(failures)} failures")
    for line in failures:
        print("  FAIL", line)
    return failures


def bench(label, fn, ideal_bytes, check_against=None):
    if elapsed() > ARGS.budget:
        print(f"  skip {label}: over budget")
        return
    ok, err = check_against() if check_against else (None, None)
    ms = do_bench(fn, warmup=50, rep=300, return_mode="median")
    row = {"label": label, "ms": ms, "gbps": ideal_bytes / ms / 1e6, "ok": ok, "err": err}
    RESULTS.append(row)
    print(f"  {label:48s} {ms:8.4f} ms {row['gbps']:7.0f} GB/s  ok={ok} err={err if err is None else f'{err:.2g}'}")


@triton.jit
def _softmax_persistent_kernel(x_ptr, y_ptr, rows, cols, BLOCK_C: tl.constexpr, NUM_STAGES: tl.constexpr):
    # Experimental: a persistent grid; tl.range pipelines the next row's load behind this one.
    c = tl.arange(0, BLOCK_C)
    mask = c < cols
    for row in tl.range(tl.program_id(0), rows, tl.num_programs(0), num_stages=NUM_STAGES):
        base = row.to(tl.int64) * cols
        x = tl.load(x_ptr + base + c, mask=mask, other=float("-inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        y = e * (1.0 / tl.sum(e, axis=0))
        tl.store(y_ptr + base + c, y.to(y_ptr.dtype.element_ty), mask=mask)


def family_large(name, configs):
    family = get_family(name)
    params = family.sizes["large"][0]
    case = family.build_case("large", params, "bf16", DEV, seed=0)
    ref = family.reference(case.inputs, params)
    ideal = family.cost(params, "bf16").bytes
    print(f"[{elapsed():.0f}s] {name} {params} bf16, ideal {ideal / 1e9:.3f} GB")
    for variant in family.ordered_variants():
        try:
            fn = variant.build(case)
            bench(f"{name}/{variant.name}", fn, ideal, lambda fn=fn: verdict(family, "bf16", fn(), ref))
        except Exception as exc:  # report and go on: one broken variant must not hide the rest
            print(f"  {name}/{variant.name} FAILED: {type(exc).__name__}: {exc}")
    for label, fn in configs(case):
        try:
            bench(f"{name}/{label}", fn, ideal, lambda fn=fn: verdict(family, "bf16", fn(), ref))
        except Exception as exc:
            print(f"  {name}/{label} FAILED: {type(exc).__name__}: {exc}")
    torch.cuda.empty_cache()


def gelu_configs(case):
    x, b = case["x"], case["bias"]
    out = torch.empty_like(x)
    for br, bc, w in (
        (1, 4096, 4),
        (2, 4096, 8),
        (4, 1024, 4),
        (8, 1024, 8),
        (4, 2048, 8),
        (16, 1024, 8),
        (8, 2048, 8),
    ):
        yield f"triton r{br} c{bc} w{w}", lambda br=br, bc=bc, w=w: triton_gelu(x, b, 2.0, out, br, bc, w)
    for rows_in_flight in (1, 2, 4, 8):
        yield f"cuda rows in flight {rows_in_flight}", lambda r=rows_in_flight: cuda_gelu(x, b, 2.0, out, r)


def softmax_configs(case):
    x = case["x"]
    out = torch.empty_like(x)
    rows, cols = x.shape
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    builtin = torch.compile(lambda t: torch.softmax(t, dim=-1), dynamic=False)
    yield "compile of torch.softmax (context)", lambda: builtin(x)
    for w in (4, 8, 16, 32):
        yield f"triton rows w{w}", lambda w=w: triton_softmax(x, out, num_warps=w)
    for lb, w in ((2048, 4), (4096, 8), (8192, 16)):
        yield f"triton looped b{lb} w{w}", lambda lb=lb, w=w: triton_softmax(x, out, 0, lb, w)
    for w, st, per_sm in ((16, 1, 2), (16, 2, 2), (8, 2, 2), (16, 3, 1), (32, 2, 1)):

        def run(w=w, st=st, per_sm=per_sm):
            grid = (min(rows, sms * per_sm),)
            _softmax_persistent_kernel[grid](
                x, out, rows, cols, BLOCK_C=triton.next_power_of_2(cols), NUM_STAGES=st, num_warps=w
            )
            return out

        yield f"triton persistent w{w} st{st} {per_sm}/SM", run
    for mode, threads in (
        ("registers", 256),
        ("registers", 512),
        ("registers", 1024),
        ("looped", 512),
        ("looped", 1024),
    ):
        yield f"cuda {mode} t{threads}", lambda mode=mode, threads=threads: cuda_softmax(x, out, threads, mode)


def softmax_wide():
    """Rows past the register limits: where the looped kernels take over (2^28 elements each)."""
    for rows, cols in ((8192, 32768), (2048, 131072)):
        softmax_wide_case(rows, cols)


def softmax_wide_case(rows, cols):
    family = get_family("softmax")
    params = {"rows": rows, "cols": cols}
    case = family.build_case("custom", params, "bf16", DEV, seed=0)
    ref = family.reference(case.inputs, params)
    ideal = family.cost(params, "bf16").bytes
    x = case["x"]
    out = torch.empty_like(x)
    print(f"[{elapsed():.0f}s] softmax {params} bf16")
    configs = [
        ("eager", lambda: torch.softmax(x, dim=-1)),
        ("triton (default)", lambda: triton_softmax(x, out)),
        ("cuda (default)", lambda: cuda_softmax(x, out)),
        ("cuda looped t1024", lambda: cuda_softmax(x, out, 1024, "looped")),
        ("cuda looped t512", lambda: cuda_softmax(x, out, 512, "looped")),
    ]
    if cols <= 32768:
        configs += [
            ("triton rows w16", lambda: triton_softmax(x, out, cols, num_warps=16)),
            ("triton rows w32", lambda: triton_softmax(x, out, cols, num_warps=32)),
            ("cuda registers t512", lambda: cuda_softmax(x, out, 512, "registers")),
        ]
    for label, fn in configs:
        try:
            bench(f"softmax {cols}/{label}", fn, ideal, lambda fn=fn: verdict(family, "bf16", fn(), ref))
        except Exception as exc:
            print(f"  softmax {cols}/{label} FAILED: {type(exc).__name__}: {exc}")


def main():
    print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__)
    failures = correctness_small()
    family_large("gelu", gelu_configs)
    family_large("softmax", softmax_configs)
    softmax_wide()
    if ARGS.out:
        os.makedirs(ARGS.out, exist_ok=True)
        with open(os.path.join(ARGS.out, "gelu_softmax_sweep.json"), "w") as handle:
            json.dump({"failures": failures, "results": RESULTS}, handle, indent=1)
    print(f"[{elapsed():.0f}s] done")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("OUT"))
    parser.add_argument("--budget", type=float, default=150.0)
    ARGS = parser.parse_args()
    main()
