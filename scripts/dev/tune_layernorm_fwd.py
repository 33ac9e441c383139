# ruff: noqa: B023  (each lambda is timed inside report() before the loop moves on)
"""Device sweep: forward LayerNorm (+GELU) Triton candidates at [16384, 4096] bf16.

Order: the current kernel first, the candidates (each checked at the large size before timing),
the current kernel again (drift), torch.compile baselines LAST (an earlier sweep suggested that
compiling first changed later Triton timings), then small-shape checks (nothing timed after them).
Everything is timed with rooflint's timer (device time, L2 flushed). Importable on CPU: the
candidates are checked under TRITON_INTERPRET=1 by `python scripts/dev/tune_layernorm_fwd.py --cpu`.
"""

import json
import os
import sys
import time

import torch
import triton
import triton.language as tl

from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels import layernorm as ln


@triton.jit
def _load_wb(w_ptr, b_ptr, offs, mask, EVEN: tl.constexpr):
    if EVEN:
        w = tl.load(w_ptr + offs, eviction_policy="evict_last")
        b = tl.load(b_ptr + offs, eviction_policy="evict_last")
    else:
        w = tl.load(w_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last")
        b = tl.load(b_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last")
    return w, b


@triton.jit
def _finish_row(
    x, row, offs, mask, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, hidden, eps,
    GELU: tl.constexpr, STATS: tl.constexpr, EVEN: tl.constexpr, HOIST: tl.constexpr,
):  # fmt: skip
    # HOIST: w_ptr and b_ptr are w and b themselves (input dtype), loaded once by the caller.
    mean = tl.sum(x, axis=0) / hidden
    centered = x - mean
    if not EVEN:
        centered = tl.where(mask, centered, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / hidden + eps)
    if HOIST:
        w = w_ptr.to(tl.float32)
        b = b_ptr.to(tl.float32)
    else:
        w, b = _load_wb(w_ptr, b_ptr, offs, mask, EVEN)
        w, b = w.to(tl.float32), b.to(tl.float32)
    y = centered * rstd * w + b
    if GELU:
        y = ln.gelu_tanh(y)
    if EVEN:
        tl.store(y_ptr + row * hidden + offs, y.to(y_ptr.dtype.element_ty), eviction_policy="evict_first")
    else:
        tl.store(y_ptr + row * hidden + offs, y.to(y_ptr.dtype.element_ty), mask=mask, eviction_policy="evict_first")
    if STATS:
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)


@triton.jit
def _ln_pipe_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, rows, hidden, eps,
    ROWS: tl.constexpr, PERSISTENT: tl.constexpr, HOIST: tl.constexpr,
    BLOCK: tl.constexpr, GELU: tl.constexpr, STATS: tl.constexpr, EVEN: tl.constexpr,
):  # fmt: skip
    # Several rows per program, software-pipelined by hand: the next row's load is issued before
    # this row's reductions, so a program always has a row of loads in flight.
    pid = tl.program_id(0)
    if PERSISTENT:
        step = tl.num_programs(0)
        first = pid
        end = rows
    else:
        step = 1
        first = pid * ROWS
        end = tl.minimum(first + ROWS, rows)
    count = tl.cdiv(end - first, step)
    offs = tl.arange(0, BLOCK)
    mask = offs < hidden
    row = first.to(tl.int64)
    if EVEN:
        nxt = tl.load(x_ptr + row * hidden + offs, eviction_policy="evict_first")
    else:
        nxt = tl.load(x_ptr + row * hidden + offs, mask=mask, other=0.0, eviction_policy="evict_first")
    wv, bv = w_ptr, b_ptr
    if HOIST:
        wv, bv = _load_wb(w_ptr, b_ptr, offs, mask, EVEN)
    for _ in range(count):
        x = nxt.to(tl.float32)
        following = row + step
        # One compare covers both the row's end and the last row: past it, no lane loads.
        limit = tl.where(following < end, hidden, 0)
        nxt = tl.load(x_ptr + following * hidden + offs, mask=offs < limit, other=0.0, eviction_policy="evict_first")
        _finish_row(x, row, offs, mask, wv, bv, y_ptr, mean_ptr, rstd_ptr, hidden, eps, GELU, STATS, EVEN, HOIST)
        row = following


@triton.jit
def _ln_staged_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, rows, hidden, eps, STAGES: tl.constexpr,
    BLOCK: tl.constexpr, GELU: tl.constexpr, STATS: tl.constexpr, EVEN: tl.constexpr,
):  # fmt: skip
    # Persistent, rows strided by the grid; tl.range(num_stages) lets Triton's pipeliner prefetch
    # x through shared memory (cp.async) STAGES-1 rows ahead.
    offs = tl.arange(0, BLOCK)
    mask = offs < hidden
    for r in tl.range(tl.program_id(0), rows, tl.num_programs(0), num_stages=STAGES):
        row = tl.cast(r, tl.int64)
        if EVEN:
            x = tl.load(x_ptr + row * hidden + offs, eviction_policy="evict_first").to(tl.float32)
        else:
            x = tl.load(x_ptr + row * hidden + offs, mask=mask, other=0.0, eviction_policy="evict_first")
            x = x.to(tl.float32)
        _finish_row(x, row, offs, mask, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, hidden, eps, GELU, STATS, EVEN, False)


@triton.jit
def _ln_tile_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, rows, hidden, eps, ROWS: tl.constexpr,
    BLOCK: tl.constexpr, GELU: tl.constexpr, STATS: tl.constexpr, EVEN: tl.constexpr,
):  # fmt: skip
    # ROWS rows as one [ROWS, BLOCK] tile: all their loads issued at once, one set of block
    # reductions (and barriers) for all of them.
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = r < rows
    offs = tl.arange(0, BLOCK)
    cmask = offs < hidden
    full = rmask[:, None] & cmask[None, :]
    at = r.to(tl.int64)[:, None] * hidden + offs[None, :]
    if EVEN:
        x = tl.load(x_ptr + at, eviction_policy="evict_first").to(tl.float32)
    else:
        x = tl.load(x_ptr + at, mask=full, other=0.0, eviction_policy="evict_first").to(tl.float32)
    mean = tl.sum(x, axis=1) / hidden
    centered = x - mean[:, None]
    if not EVEN:
        centered = tl.where(cmask[None, :], centered, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=1) / hidden + eps)
    w = tl.load(w_ptr + offs, mask=cmask, other=0.0, eviction_policy="evict_last").to(tl.float32)
    b = tl.load(b_ptr + offs, mask=cmask, other=0.0, eviction_policy="evict_last").to(tl.float32)
    y = centered * rstd[:, None] * w[None, :] + b[None, :]
    if GELU:
        y = ln.gelu_tanh(y)
    if EVEN:
        tl.store(y_ptr + at, y.to(y_ptr.dtype.element_ty), eviction_policy="evict_first")
    else:
        tl.store(y_ptr + at, y.to(y_ptr.dtype.element_ty), mask=full, eviction_policy="evict_first")
    if STATS:
        tl.store(mean_ptr + r, mean, mask=rmask)
        tl.store(rstd_ptr + r, rstd, mask=rmask)


RESIDENT = {}


def _resident(compiled, warps):
    """Programs per SM that fit (H100: 64K registers, 228 KiB shared, 64 warps), from the binary."""
    per_warp = -(-compiled.n_regs * 32 // 256) * 256  # registers are allocated per warp, 256 at a time
    by_shared = 233472 // (compiled.metadata.shared + 1024)  # 1 KiB a block reserved by the driver
    return max(1, min(65536 // per_warp // warps, by_shared, 64 // warps, 32))


def candidate(kind, warps, rows_per=1, stages=3, hoist=False):
    """A launcher with triton_layernorm's signature; warps apply at hidden 4096, scaled below."""

    def launch(x, weight, bias, y, mean=None, rstd=None, *, gelu=False):
        rows, hidden = x.shape
        stats = mean is not None
        block = max(triton.next_power_of_2(hidden), 32)
        nw = max(1, min(warps, block // 256))
        args = (x, weight, bias, y, mean if stats else y, rstd if stats else y, rows, hidden, ln.EPS)
        meta = dict(BLOCK=block, GELU=gelu, STATS=stats, EVEN=block == hidden, num_warps=nw)
        if kind == "pipe":
            _ln_pipe_kernel[(triton.cdiv(rows, rows_per),)](*args, ROWS=rows_per, PERSISTENT=False, HOIST=hoist, **meta)
        elif kind in ("persist", "staged"):
            if kind == "persist":
                kernel, meta = _ln_pipe_kernel, dict(meta, ROWS=1, PERSISTENT=True, HOIST=hoist)
            else:
                kernel, meta = _ln_staged_kernel, dict(meta, STAGES=stages)
            key = (kind, warps, stages, hoist, block, gelu, stats, x.dtype, x.is_cuda)
            if key not in RESIDENT:
                sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 2
                compiled = kernel[(min(rows, sms),)](*args, **meta)  # compiles; any grid covers all rows
                RESIDENT[key] = sms * (_resident(compiled, nw) if x.is_cuda else 2)
                if x.is_cuda:
                    print(f"  {key[:4]} gelu={gelu}: {compiled.n_regs} regs, {compiled.metadata.shared} B shared, "
                          f"{RESIDENT[key] // sms} programs/SM", flush=True)  # fmt: skip
            # Equal rows per program (1024 programs of 16 rows, not 1056 of 15.5): no ragged tail.
            per = triton.cdiv(rows, RESIDENT[key])
            kernel[(triton.cdiv(rows, per),)](*args, **meta)
        else:
            meta["EVEN"] = block == hidden and rows % rows_per == 0
            _ln_tile_kernel[(triton.cdiv(rows, rows_per),)](*args, ROWS=rows_per, **meta)
        return y

    return launch


CANDIDATES = {
    "pipe r2 w8": candidate("pipe", 8, rows_per=2),
    "persist w8": candidate("persist", 8),
    "tile r2 w8": candidate("tile", 8, rows_per=2),
    "pipe r2 w4": candidate("pipe", 4, rows_per=2),
    "pipe r4 w8": candidate("pipe", 8, rows_per=4),
    "persist w4": candidate("persist", 4),
    "staged s3 w8": candidate("staged", 8, stages=3),
    "staged s2 w8": candidate("staged", 8, stages=2),
    "tile r2 w16": candidate("tile", 16, rows_per=2),
    "tile r4 w16": candidate("tile", 16, rows_per=4),
    "persist w8 hoist": candidate("persist", 8, hoist=True),
    "pipe r1 w8 hoist": candidate("pipe", 8, hoist=True),
    "pipe r4 w4": candidate("pipe", 4, rows_per=4),
    "staged s3 w4": candidate("staged", 4, stages=3),
}
SMALL = [(3, 1), (5, 1000), (3, 4097), (7, 256)]


def run_family(fam, launch, case, gelu):
    x, w, b = case["x"], case["weight"], case["bias"]
    y = torch.empty_like(x)
    if gelu:
        return lambda: launch(x, w, b, y, gelu=True)
    mean, rstd = (torch.empty(x.shape[0], dtype=torch.float32, device=x.device) for _ in range(2))
    return lambda: (launch(x, w, b, y, mean, rstd), mean, rstd)


def check_small(device, dtypes, names):
    failures = []
    for gelu in (False, True):
        fam = get_family("layernorm_gelu" if gelu else "layernorm")
        for dtype in dtypes:
            for rows, hidden in SMALL:
                params = {"rows": rows, "hidden": hidden}
                case = fam.build_case("custom", params, dtype, torch.device(device))
                expected = fam.reference(case.inputs, params)
                for name in names:
                    verdict = check(fam, dtype, run_family(fam, CANDIDATES[name], case, gelu)(), expected)
                    if not verdict.passed:
                        failures.append((name, fam.name, dtype, rows, hidden, verdict.error))
                    print(f"check {name:18s} {fam.name:15s} {dtype} {rows}x{hidden}: {verdict.error:.3g}", flush=True)
    return failures


def main():
    from rooflint.engine.timing import time_cuda

    t0 = float(os.environ.get("T0", time.time()))
    out = os.environ.get("OUT", "/tmp")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    params = {"rows": 16384, "hidden": 4096}
    results = []

    def log(name, fam, timing, error=None):
        row = {"name": name, "family": fam, "us": timing.median_ms * 1e3, "p20": timing.p20_ms * 1e3}
        row.update(p80=timing.p80_ms * 1e3, error=error, t=time.time() - t0)
        results.append(row)
        err = "" if error is None else f" err {error:.3g}"
        print(f"{fam:15s} {name:18s} {row['us']:8.2f} us ({row['p20']:.2f}-{row['p80']:.2f}){err}", flush=True)
        with open(f"{out}/tune_layernorm_fwd.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")

    setups = {}
    for gelu in (False, True):
        fam = get_family("layernorm_gelu" if gelu else "layernorm")
        case = fam.build_case("large", params, "bf16", torch.device("cuda"))
        setups[gelu] = (fam, case, fam.reference(case.inputs, params))

    def time_current(label):
        for fam, case, _ in setups.values():
            log(label, fam.name, time_cuda(fam.variants["triton"].build(case), l2_bytes=l2))

    time_current("current (first)")
    for name, launch in CANDIDATES.items():
        if time.time() - t0 > 130:
            print(f"skipped {name}: out of time", flush=True)
            continue
        for gelu, (fam, case, expected) in setups.items():
            try:
                fn = run_family(fam, launch, case, gelu)
                verdict = check(fam, "bf16", fn(), expected)
                log(name, fam.name, time_cuda(fn, l2_bytes=l2), verdict.error if verdict.passed else float("inf"))
            except Exception as exc:  # a candidate that fails to compile must not end the sweep
                print(f"{fam.name} {name}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    time_current("current (last)")
    for fam, case, _ in setups.values():
        log("compile", fam.name, time_cuda(fam.variants["compile"].build(case), l2_bytes=l2))
    setups.clear()  # the float64 references: free them for the small checks
    torch.cuda.empty_cache()
    # Small shapes for the fastest first (sum over both families), bf16 only: every dtype of every
    # candidate is checked on CPU under the interpreter; each shape here is a fresh compile.
    total = {}
    for r in results:
        if r["name"] in CANDIDATES and r["error"] != float("inf"):
            total[r["name"]] = total.get(r["name"], 0.0) + r["us"]
    ranked = sorted(total, key=total.get)
    for name in ranked:
        if time.time() - t0 > 205:
            print(f"small checks stopped before {name}: out of time", flush=True)
            break
        print("small-shape failures:", name, check_small("cuda", ["bf16"], [name]), flush=True)


if __name__ == "__main__":
    if "--cpu" in sys.argv:
        print("failures:", check_small("cpu", ["fp32", "fp16", "bf16"], list(CANDIDATES)))
    else:
        main()
