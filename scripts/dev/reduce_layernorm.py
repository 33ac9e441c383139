"""Device script for reduce_sum, layernorm and layernorm_gelu (run on the H100 through `run`).

  python3 scripts/dev/reduce_layernorm.py [--parts check,sweep]

check: the Triton and CUDA kernels against float64 on the GPU, on irregular shapes and every dtype
       (the CUDA sources cannot run anywhere else), plus bitwise determinism of the reductions.
sweep: bf16 large-size timings (triton.testing.do_bench, L2 flushed, median) of eager, compile and
       a few launch configurations of the Triton and CUDA kernels, to pick the defaults.
Then run `rooflint bench reduce_sum layernorm layernorm_gelu --size large --dtype bf16` for the table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import triton

from rooflint.core.registry import get_family
from rooflint.engine import cuda_build
from rooflint.engine.correctness import relative_error

OUT = os.environ.get("OUT", "/tmp/out")
LOG = []


def emit(**row):
    LOG.append(row)
    print(json.dumps(row), flush=True)
    with open(os.path.join(OUT, "reduce_layernorm.jsonl"), "a") as handle:
        handle.write(json.dumps(row) + "\n")


def check_variant(family_name, variant, params, dtype, repeat=1):
    family = get_family(family_name)
    case = family.build_case("custom", params, dtype, torch.device("cuda"))
    expected = family.reference(case.inputs, params)
    fn = family.variants[variant].build(case)
    first = fn()
    first = tuple(t.clone() for t in first) if isinstance(first, tuple) else first.clone()
    error = relative_error(first, expected)
    if isinstance(first, tuple):
        first = first[0]
    same = all(torch.equal(first, (lambda o: o[0] if isinstance(o, tuple) else o)(fn())) for _ in range(repeat - 1))
    ok = error <= family.tolerances[dtype]
    emit(part="check", family=family_name, variant=variant, params=params, dtype=dtype, error=error, ok=ok,
         bitwise_repeat=same if repeat > 1 else None)  # fmt: skip


def part_check():
    reduce_shapes = [(1, 1), (1, 1000), (1, 4097), (1, 3_000_017), (3, 4097), (257, 1000), (70_000, 3), (5, 1 << 20)]
    ln_shapes = [(3, 1), (5, 7), (3, 4097), (2, 70_001), (8, 65_536), (3, 1 << 20), (70_000, 8), (64, 4096)]
    # Triton is checked on every dtype under the interpreter in tests/; here bf16 only, to spend
    # the device's minutes on the CUDA sources, which nothing else can run.
    for dtype in ("fp32", "fp16", "bf16"):
        variants = ("triton", "cuda") if dtype == "bf16" else ("cuda",)
        for rows, cols in reduce_shapes:
            for variant in variants:
                check_variant("reduce_sum", variant, {"rows": rows, "cols": cols}, dtype)
        for family in ("layernorm", "layernorm_gelu"):
            for rows, hidden in ln_shapes:
                for variant in variants:
                    check_variant(family, variant, {"rows": rows, "hidden": hidden}, dtype)
    for variant in ("triton", "cuda"):  # the one-pass combine must be deterministic at full size
        check_variant("reduce_sum", variant, {"rows": 1, "cols": 1 << 28}, "bf16", repeat=5)


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def timed(family_name, params, label, fn, extra=None):
    family = get_family(family_name)
    ms = bench(fn)
    gbps = family.cost(params, "bf16").bytes / (ms * 1e-3) / 1e9
    emit(part="sweep", family=family_name, params=params, variant=label, ms=round(ms, 5), gbps=round(gbps, 1),
         **(extra or {}))  # fmt: skip


def part_sweep():
    from rooflint.kernels import reduce_sum as rs

    dev = torch.device("cuda")
    family = get_family("reduce_sum")
    for params in family.sizes["large"]:
        case = family.build_case("large", params, "bf16", dev)
        timed("reduce_sum", params, "eager", family.variants["eager"].build(case))  # compile: in bench
        x = case["x"]
        for block, warps, per_sm in [(8192, 16, 4), (8192, 16, 8), (8192, 8, 8), (4096, 8, 8), (8192, 16, 32)]:
            timed("reduce_sum", params, f"triton_b{block}_w{warps}_p{per_sm}", rs.RowSum(x, block, warps, per_sm))
        for threads, per_sm in [(512, 4), (512, 8), (256, 8)]:
            timed("reduce_sum", params, f"cuda_t{threads}_p{per_sm}", rs.CudaRowSum(x, threads, per_sm))
        del case, x

    for name in ("layernorm", "layernorm_gelu"):
        sweep_layernorm(name)


def sweep_layernorm(name):
    from rooflint.kernels import layernorm as ln

    dev = torch.device("cuda")
    library = cuda_build.load(cuda_build.family_source(ln.__file__))
    family = get_family(name)
    params = family.sizes["large"][0]
    case = family.build_case("large", params, "bf16", dev)
    for variant in ("eager", "eager_unfused", "compile"):
        timed(name, params, variant, family.variants[variant].build(case))
    x, w, b = case["x"], case["weight"], case["bias"]
    gelu = name == "layernorm_gelu"
    y = torch.empty_like(x)
    stats = (None, None) if gelu else tuple(torch.empty(x.shape[0], device=dev) for _ in range(2))
    for warps in (4, 8):
        run = lambda warps=warps: ln.triton_layernorm(x, w, b, y, *stats, gelu=gelu, num_warps=warps)
        timed(name, params, f"triton_w{warps}", run)
    for threads in (128, 256):
        run = lambda threads=threads: ln.cuda_layernorm(library, x, w, b, y, *stats, gelu=gelu, threads=threads)
        timed(name, params, f"cuda_t{threads}", run)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="check,sweep")
    args = parser.parse_args()
    os.makedirs(OUT, exist_ok=True)
    emit(part="env", device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__)
    start = time.time()
    for part in args.parts.split(","):
        {"check": part_check, "sweep": part_sweep}[part]()
        emit(part="done", name=part, seconds=round(time.time() - start, 1))
    failed = [row for row in LOG if row.get("part") == "check" and not row["ok"]]
    print(f"{len(failed)} failed checks", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
