"""Device check for the attention family: correctness of every variant, then timings, on one GPU.

Run on the H100 from the repository root:  python3 scripts/dev/attention.py
(``--small``: only the CUDA sweep at odd shapes; ``--profile-once``: two CUDA calls for ncu.)
Writes $OUT/attention.jsonl (one JSON row per measurement) and prints each row as it lands.
1. the CUDA kernel against the float64 reference at irregular
   small shapes, which the CPU tests cannot run;
2. bf16 at the large preset, non-causal then causal: every variant checked, its peak extra memory
   measured, then timed with triton.testing.do_bench (L2 flushed, median).
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import time

import torch
import triton

from rooflint.core.registry import get_family
from rooflint.engine.correctness import check

OUT = os.environ.get("OUT", "/tmp/attention_out")
os.makedirs(OUT, exist_ok=True)
LOG = open(os.path.join(OUT, "attention.jsonl"), "a")
START = time.time()
FAMILY = get_family("attention")
DEVICE = torch.device("cuda")
DIAGNOSED = []


def log(**row):
    row["t"] = round(time.time() - START, 1)
    line = json.dumps(row)
    print(line, flush=True)
    LOG.write(line + "\n")
    LOG.flush()


def diagnose(out, expected):
    """Where a wrong output is wrong: which query rows and head-dim columns, and is it the mask."""
    err = (out.double() - expected).abs()
    scale = expected.abs().mean()
    bad = err > 0.05 * scale
    rows = bad.any(dim=-1)[0, 0].nonzero().flatten().tolist()
    cols = bad.any(dim=-2)[0, 0].nonzero().flatten().tolist()
    heads = bad.flatten(2).any(-1).nonzero().tolist()
    log(
        stage="diagnose",
        bad_fraction=float(bad.double().mean()),
        rows=rows[:40],
        cols=cols[:40],
        heads=heads[:8],
        out_sample=out[0, 0, :2, :6].float().tolist(),
        ref_sample=expected[0, 0, :2, :6].tolist(),
    )


def small_sweep():
    for n in (1, 17, 64, 130, 257):
        for d in (64, 128):
            for causal in (False, True):
                for dtype in ("fp16", "bf16"):
                    params = {"B": 2, "H": 3, "N": n, "D": d, "causal": causal}
                    case = FAMILY.build_case("custom", params, dtype, DEVICE)
                    expected = FAMILY.reference(case.inputs, params)
                    for name in ["cuda"]:  # Triton's odd shapes are covered by the interpreter tests
                        try:
                            out = FAMILY.variants[name].build(case)()
                            verdict = check(FAMILY, dtype, out, expected)
                            if not verdict.passed:
                                log(stage="small", variant=name, dtype=dtype, **params, error=verdict.error, ok=False)
                                DIAGNOSED.append(params)
                                if len(DIAGNOSED) <= 3:
                                    diagnose(out, expected)
                        except Exception as error:  # keep going: one broken shape must not hide the rest
                            log(stage="small", variant=name, dtype=dtype, **params, exception=repr(error)[:300])
    log(stage="small", done=True)


def large(order, budget_s):
    # Variant-major, both cases per variant: a variant that faults (and poisons the CUDA context)
    # loses only the variants after it, so the riskiest run late.
    cases = []
    for params in FAMILY.sizes["large"]:
        case = FAMILY.build_case("large", params, "bf16", DEVICE)
        began = time.time()
        cases.append((case, FAMILY.reference(case.inputs, params)))
        torch.cuda.synchronize()
        log(stage="reference", **params, seconds=round(time.time() - began, 1))
    for name in order:
        for case, expected in cases:
            params = case.params
            if time.time() - START > budget_s:
                log(stage="large", variant=name, **params, skipped="time budget")
                continue
            row = {"stage": "large", "variant": name, **params}
            fn = None
            try:
                fn = FAMILY.variants[name].build(case)
                out = fn()  # compiles, autotunes
                verdict = check(FAMILY, "bf16", out, expected)
                row.update(error=float(f"{verdict.error:.3g}"), ok=verdict.passed)
                del out
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                out = fn()
                torch.cuda.synchronize()
                # Everything the call allocated, its output included unless the builder preallocated it.
                row["peak_extra_MiB"] = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)
                del out
                ms = triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")
                row.update(ms=round(ms, 4), tflops=round(case.cost.flops / ms / 1e9, 1))
                if getattr(fn, "note", ""):
                    row["note"] = fn.note
            except Exception as error:
                row["exception"] = repr(error)[:400]
            log(**row)
            fn = None
            torch.cuda.empty_cache()


def triton_ptx_summary():
    """Which MMA instructions Triton emitted for the attention kernels (wgmma on sm_90a or mma.sync)."""
    cache = os.environ.get("TRITON_CACHE_DIR", os.path.expanduser("~/.triton/cache"))
    for path in glob.glob(os.path.join(cache, "**", "_attn_fwd_kernel.ptx"), recursive=True):
        text = open(path).read()
        meta_path = path[:-4] + ".json"
        meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
        log(
            stage="triton_ptx",
            wgmma=len(re.findall(r"wgmma\.mma_async", text)),
            mma_sync=len(re.findall(r"\bmma\.sync", text)),
            cp_async=len(re.findall(r"cp\.async\.", text)),
            tma=len(re.findall(r"cp\.async\.bulk\.tensor", text)),
            num_warps=meta.get("num_warps"),
            num_stages=meta.get("num_stages"),
            shared=meta.get("shared"),
        )


def profile_once():
    """Two CUDA-variant calls at the large non-causal size, for ncu to profile the second one."""
    params = FAMILY.sizes["large"][0]
    case = FAMILY.build_case("large", params, "bf16", DEVICE)
    fn = FAMILY.variants["cuda"].build(case)
    fn()
    fn()
    torch.cuda.synchronize()


def main():
    if "--profile-once" in sys.argv:
        profile_once()
        return
    props = torch.cuda.get_device_properties(0)
    log(stage="env", device=props.name, torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda)
    if "--small" in sys.argv:  # its own process: a faulting kernel cannot take the timings down with it
        small_sweep()
        return
    order = ["triton", "eager", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "eager_unfused", "cuda", "compile"]
    large(order, budget_s=float(os.environ.get("ATTN_BUDGET_S", "125")))
    triton_ptx_summary()


if __name__ == "__main__":
    main()
