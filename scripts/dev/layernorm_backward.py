"""Device script for layernorm_backward: correctness of triton/cuda on odd shapes, errors at the large
size, a small launch-config sweep, peers, and (optional) ncu DRAM bytes.

    python3 scripts/dev/layernorm_backward.py [--sweep] [--ncu]    # writes $OUT/lnb.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
import triton

from rooflint.core.registry import get_family
from rooflint.engine.correctness import relative_error
from rooflint.kernels import layernorm_backward as lnb

OUT = os.environ.get("OUT", "/tmp")
FAMILY = get_family("layernorm_backward")
DEV = torch.device("cuda")
START = time.time()
results: dict = {"odd_shapes": [], "large_errors": [], "timings_ms": {}}


def save():
    with open(os.path.join(OUT, "lnb.json"), "w") as handle:
        json.dump(results, handle, indent=1)


def bench(fn):
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def args_of(case):
    return case["x"], case["dy"], case["weight"], case["mean"], case["rstd"]


def odd_shapes():
    shapes = [(1, 1), (3, 1000), (300, 1), (300, 1000), (77, 4097), (64, 8192), (33, 20000), (5000, 64)]
    for rows, hidden in shapes:
        for dtype in ("fp32", "fp16", "bf16"):
            params = {"rows": rows, "hidden": hidden}
            case = FAMILY.build_case("custom", params, dtype, DEV)
            out_ref = FAMILY.compare(None, FAMILY.reference(case.inputs, params))[1]
            for name in ("triton", "cuda"):
                out = FAMILY.variants[name].build(case)()
                errors = [relative_error(o, r) for o, r in zip(out, out_ref)]
                ok = max(errors) <= FAMILY.tolerances[dtype]
                results["odd_shapes"].append([name, dtype, rows, hidden, [f"{e:.2e}" for e in errors], ok])
                if not ok:
                    print("FAIL", name, dtype, rows, hidden, errors, flush=True)
    print("odd shapes:", sum(r[-1] for r in results["odd_shapes"]), "/", len(results["odd_shapes"]), "pass")


def large_errors():
    params = FAMILY.sizes["large"][0]
    for dtype in ("bf16", "fp16", "fp32"):
        case = FAMILY.build_case("large", params, dtype, DEV)
        ref = FAMILY.compare(None, FAMILY.reference(case.inputs, params))[1]
        names = ["eager", "triton", "cuda"]
        for name in names:
            out = FAMILY.variants[name].build(case)()
            errors = [f"{relative_error(o, r):.2e}" for o, r in zip(out, ref)]
            results["large_errors"].append([name, dtype, errors])
            print("large", dtype, name, errors, flush=True)
        del case, ref
        torch.cuda.empty_cache()


def sweep():
    params = FAMILY.sizes["large"][0]
    case = FAMILY.build_case("large", params, "bf16", DEV)
    args = args_of(case)
    rows, hidden = params["rows"], params["hidden"]
    t = results["timings_ms"]
    x, dy = case["x"], case["dy"]
    scratch = torch.empty_like(x)
    t["copy_x_to_dx (2 x 128 MiB)"] = bench(lambda: scratch.copy_(x))
    for name in ("eager", "triton", "cuda"):
        t[name] = bench(FAMILY.variants[name].build(case))
        print(name, t[name], flush=True)
    # The peer row: autograd forward + backward through F.layer_norm, dx the only grad needed.
    xr = x.detach().requires_grad_()
    weight, bias = case["weight"], case["bias"]

    def fwd_bwd():
        xr.grad = None
        F.layer_norm(xr, (hidden,), weight, bias, lnb.EPS).backward(dy)

    t["eager_fwd_bwd_dx_only"] = bench(fwd_bwd)
    t["eager_fwd_only"] = bench(lambda: F.layer_norm(x, (hidden,), weight, bias, lnb.EPS))
    for prefetch in (True, False):
        for warps in (8, 16):
            per_sm = lnb._programs_per_sm(4096, warps, prefetch, x.dtype, 0)
            for extra in (0, 1):
                programs = lnb.num_programs(rows, DEV, per_sm + extra)
                out = lnb.allocate(x, weight, programs)
                key = f"triton prefetch={int(prefetch)} warps={warps} per_sm={per_sm + extra}"
                t[key] = bench(
                    lambda: lnb.triton_layernorm_backward(*args, num_warps=warps, prefetch=prefetch, out=out)  # noqa: B023
                )
                print(key, round(t[key], 4), flush=True)
    programs = lnb.triton_programs(rows, hidden, x.dtype, DEV)
    dx, _, _, partial = lnb.allocate(x, weight, programs)

    def rows_only():
        lnb._rows_kernel[(programs,)](*args, dx, partial[0], partial[1], rows, hidden, 4096, True, num_warps=8)

    t[f"triton rows kernel only (default, {programs} programs)"] = bench(rows_only)


def ncu():
    code = (
        "import torch; from rooflint.core.registry import get_family; f=get_family('layernorm_backward');"
        "c=f.build_case('large', f.sizes['large'][0], 'bf16', torch.device('cuda'));"
        "fns=[f.variants[v].build(c) for v in ('triton','cuda')];"
        "[fn() for fn in fns]; torch.cuda.synchronize();"
        "torch.cuda.cudart().cudaProfilerStart(); [fn() for fn in fns]; torch.cuda.synchronize();"
        "torch.cuda.cudart().cudaProfilerStop()"
    )
    command = [
        "ncu", "--profile-from-start", "off", "--metrics",
        "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,launch__registers_per_thread,"
        "sm__warps_active.avg.pct_of_peak_sustained_active", "--csv", sys.executable, "-c", code,
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        results["ncu"] = done.stdout[-20000:] + done.stderr[-2000:]
    except subprocess.TimeoutExpired:
        results["ncu"] = "timed out"


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    odd_shapes()
    save()
    large_errors()
    save()
    if "--sweep" in sys.argv:
        sweep()
        save()
    if "--ncu" in sys.argv and time.time() - START < 100:
        ncu()
        save()
    print(json.dumps(results["timings_ms"], indent=1))
    print("elapsed", round(time.time() - START, 1))
