#!/usr/bin/env python3
"""Issue 14 in one GPU call: the memory ceilings, the new Hopper kernels' correctness and timings,
and every memory-bound Triton/CUDA variant as a share of the measured ceilings.

Three child processes run one after another, so a kernel that faults or hangs (the
warp-specialized attention is the riskiest) takes only its own part down, and each gets a share of
the time budget:
  1. ceilings + gemm: `measure_gpu_ceilings` (copy, read stream, L2, matmul and FMA peaks); then
     gelu_linear at GPT-2's 1024x768x3072 and 8192^3: cuBLASLt's fused bias+GELU
     (torch._addmm_activation), the `triton` variant, `triton_wavefit` (the tile its rule picks on
     this GPU) and every _gemm_small.SWEEP_CANDIDATES tile, each checked against float64.
  2. memory: each Triton and CUDA variant (and the baseline) of the memory-bound families at the
     large size, bf16, as GB/s and % of the copy and read ceilings part 1 measured.
  3. check + attention: the Hopper attention against float64 at ragged N (fp16, bf16, both kernel
     structures); then B4 H32 N4096 D128, causal and not, for cuDNN SDPA, FA2 SDPA, the `triton`
     variant and every _attention_hopper.SWEEP_CANDIDATES config (each checked against cuDNN's
     output), then B1 H32 N16384 D128, then D=256 and D=64.
Timing: triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"), which zeroes a
256 MB buffer (an L2 flush) before every call. Rows stream to $OUT/kernel_sweep_<part>.csv as they
are measured; $OUT/kernel_sweep.csv merges them, and a compact table and the winners print last.

    . scripts/device_setup.sh; python3 scripts/device/kernel_sweep.py            # on the GPU
    python3 scripts/device/kernel_sweep.py --plan                               # what would run (CPU)
    python3 scripts/device/kernel_sweep.py --parts attention --budget 200       # one part again
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

FIELDS = (
    "part", "case", "impl", "config", "ms", "tflops", "gbps",
    "of_copy", "of_read", "vs_peer", "rel_err", "status", "note",
)  # fmt: skip
# part -> (the sections it runs, its share of the budget in seconds; the last part takes what is left)
PARTS = {"gemm": ("ceilings gemm", 55.0), "memory": ("memory", 60.0), "attention": ("check attention", None)}
MEMORY_FAMILIES = (
    "softmax", "layernorm", "layernorm_gelu", "layernorm_backward", "rope",
    "kv_cache", "reduce_sum", "vector_add", "gelu",
)  # fmt: skip
GEMM_SHAPES = {"gpt2 1024x768x3072": (1024, 768, 3072), "8192^3": (8192, 8192, 8192)}
# (label, B, H, N, D): in the order they are worth the time.
ATTENTION_CASES = (
    ("B4 H32 N4096 D128", 4, 32, 4096, 128),
    ("B1 H32 N16384 D128", 1, 32, 16384, 128),
    ("B4 H32 N4096 D256", 4, 32, 4096, 256),
    ("B4 H32 N4096 D64", 4, 32, 4096, 64),
)
SWEEP_N = 4096  # the N at which every attention candidate runs; other N get the default and the winner
MEMORY_SIZE = "large"
DEVICE = "cuda"  # module globals, so a CPU smoke run (interpreter, small sizes) can point them elsewhere
TOLERANCE = {"bf16": 1.6e-2, "fp16": 2e-3}  # the families' norm-wise gates against float64
PEER_TOLERANCE = 1.6e-2  # against cuDNN's bf16 output: both carry one bf16 rounding


class Sweep:
    """Rows to a CSV (flushed one by one, so a killed part keeps what it measured) and the console."""

    def __init__(self, path: Path, budget_s: float) -> None:
        self.start = time.monotonic()
        self.budget_s = budget_s
        self.part = path.stem.removeprefix("kernel_sweep_")
        self.file = path.open("w", newline="")
        self.writer = csv.DictWriter(self.file, FIELDS)
        self.writer.writeheader()

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.start)

    def add(self, **row) -> dict:
        row = {"part": self.part, **{key: _cell(value) for key, value in row.items()}}
        self.writer.writerow(row)
        self.file.flush()
        shown = " ".join(f"{key}={row[key]}" for key in FIELDS[1:] if row.get(key) not in (None, ""))
        print(f"[{time.monotonic() - self.start:6.1f}s] {shown}", flush=True)
        return row


def _cell(value):
    if isinstance(value, float):
        return "" if not math.isfinite(value) else f"{value:.4g}"
    return value


def bench_ms(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def measure(
    sw: Sweep, fn, *, flops=0.0, nbytes=0.0, reference=None, tolerance=None, peer_ms=None, ceilings=None,
    timed=True, need_s=2.0, **row,
):  # fmt: skip
    """Check ``fn`` against ``reference`` (if given), time it and add its row; errors become rows too.
    ``ceilings`` (copy and read GB/s) turn the row's GB/s into shares of each."""
    from rooflint.core.errors import VariantSkipped
    from rooflint.engine.correctness import relative_error

    if sw.left() < need_s:
        return sw.add(status="skipped: out of budget", **row)
    try:
        out = fn()
        err = relative_error(out, reference) if reference is not None else math.nan
        if tolerance is not None and not err <= tolerance:
            return sw.add(rel_err=err, status="FAIL", **row)
        if not timed:
            return sw.add(rel_err=err, status="ok", **row)
        ms = bench_ms(fn)
    except VariantSkipped as skipped:
        return sw.add(status=f"skipped: {skipped}", **row)
    except Exception as error:  # a config that fails to compile or launch is a row, not the end
        return sw.add(status=f"error: {type(error).__name__}: {str(error).splitlines()[0][:160]}", **row)
    gbps = nbytes / (ms * 1e-3) / 1e9 if nbytes else math.nan
    copy, read = ceilings or (math.nan, math.nan)
    return sw.add(
        ms=ms,
        tflops=flops / (ms * 1e-3) / 1e12 if flops else math.nan,
        gbps=gbps,
        of_copy=gbps / copy,
        of_read=gbps / read,
        vs_peer=peer_ms / ms if peer_ms else math.nan,
        rel_err=err,
        status="ok",
        **row,
    )


# --------------------------------------------------------------------------------------- sections


def section_ceilings(sw: Sweep, out_dir: Path) -> None:
    from rooflint.engine.ceilings import measure_gpu_ceilings

    values = measure_gpu_ceilings()
    (out_dir / "ceilings.json").write_text(json.dumps(values, indent=1))
    for name, value in sorted(values.items()):
        unit = {"gbps": value} if name.endswith("_gbps") else {"tflops": value} if "tflops" in name else {}
        sw.add(case="ceiling", impl=name, note=f"{value:.6g}", status="ok", **unit)
    read, copy = values.get("read_bandwidth_gbps"), values.get("copy_bandwidth_gbps")
    if read and copy:
        sw.add(case="ceiling", impl="read / copy", note=f"{read / copy:.3f}", status="ok")


def section_gemm(sw: Sweep) -> None:
    import torch

    from rooflint.core.registry import get_family
    from rooflint.kernels import _gemm_small as gs
    from rooflint.kernels import sm_count
    from rooflint.kernels.gelu_linear import INTERPRETER_SMS

    family = get_family("gelu_linear")
    device = torch.device(DEVICE)
    sms = sm_count(device, INTERPRETER_SMS)
    for label, (m, k, n) in GEMM_SHAPES.items():
        params = {"m": m, "k": k, "n": n}
        case = family.build_case("custom", params, "bf16", device)
        reference = family.reference(case.inputs, params)
        flops, nbytes = 2.0 * m * n * k, case.cost.bytes
        common = {"case": label, "flops": flops, "nbytes": nbytes, "reference": reference}
        common["tolerance"] = TOLERANCE["bf16"]
        peer = measure(sw, _build(family.variants["eager"].build, case), impl="cuBLASLt fused (eager)", **common)
        peer_ms = float(peer["ms"]) if peer.get("ms") else None
        for name in ("eager_unfused", "triton"):
            if name in family.variants:
                measure(sw, _build(family.variants[name].build, case), impl=name, peer_ms=peer_ms, **common)
        chosen = gs.choose_tile(m, n, sms)
        sw.add(case=label, impl="choose_tile", config=chosen.label, status="ok", note=f"{sms} SMs")
        best = (math.inf, None)
        for tile in gs.SWEEP_CANDIDATES:
            run = _build(gs.prepare, case["x"], case["w"], case["b"], tile=tile)
            impl = "wavefit (chosen)" if tile == chosen else "wavefit"
            row = measure(sw, run, impl=impl, config=tile.label, peer_ms=peer_ms, need_s=4.0, **common)
            if row.get("ms") and float(row["ms"]) < best[0]:
                best = (float(row["ms"]), tile)
        if best[1] is not None:
            sw.add(case=f"best {label}", impl="wavefit", config=best[1].label, ms=best[0], status="winner",
                   vs_peer=peer_ms / best[0] if peer_ms else math.nan, note=repr(best[1]))  # fmt: skip
        del case, reference
        torch.cuda.empty_cache()
    # Ragged edges on the GPU (M, N and K tails, no dimension a multiple of 16), with the tiles the
    # rule picks for the two shapes above, against float64.
    params = {"m": 1000, "k": 776, "n": 3000}
    for dtype in ("bf16", "fp16"):
        case = family.build_case("custom", params, dtype, device)
        reference = family.reference(case.inputs, params)
        for tile in dict.fromkeys(gs.choose_tile(m, n, sms) for m, _k, n in GEMM_SHAPES.values()):
            run = _build(gs.prepare, case["x"], case["w"], case["b"], tile=tile)
            measure(sw, run, reference=reference, tolerance=TOLERANCE[dtype], timed=False, need_s=4.0,
                    case=f"check 1000x776x3000 {dtype}", impl="wavefit vs float64", config=tile.label)  # fmt: skip


def _build(prepare, *args, **kwargs):
    """A prepared launch, or a function raising the build's error when it is called (then measured)."""
    try:
        return prepare(*args, **kwargs)
    except Exception as error:
        captured = error

        def fail():
            raise captured

        return fail


def prebuild_cuda_sources() -> list:
    """Start nvcc on the memory families' .cu files in threads (the libraries land in rooflint's
    on-disk build cache, where the memory part's process finds them); returns (name, future)."""
    import importlib

    from rooflint.core.registry import sources
    from rooflint.engine import cuda_build

    known = sources()
    paths = []
    for name in MEMORY_FAMILIES:
        if name in known:
            module = importlib.import_module(known[name].module)
            path = cuda_build.family_source(module.__file__)
            if path.exists() and path not in paths:
                paths.append(path)
    pool = ThreadPoolExecutor(max_workers=8)
    return [(path.name, pool.submit(cuda_build.load, path)) for path in paths]


def section_memory(sw: Sweep, out_dir: Path) -> None:
    import torch

    from rooflint.core.registry import get_family

    ceilings_file = out_dir / "ceilings.json"
    ceilings = json.loads(ceilings_file.read_text()) if ceilings_file.exists() else {}
    copy = ceilings.get("copy_bandwidth_gbps", math.nan)
    read = ceilings.get("read_bandwidth_gbps", math.nan)
    # The CUDA variants' libraries were built by the parent while part 1 ran (rooflint's on-disk
    # build cache); a library missing here is built on first use, inside the budget.
    device = torch.device(DEVICE)
    for name in MEMORY_FAMILIES:
        family = get_family(name)
        for size, params in family.cases(MEMORY_SIZE):
            case = family.build_case(size, params, "bf16", device)
            nbytes = case.cost.bytes
            label = f"{name} {case.shape}"
            variants = [v for v in family.ordered_variants() if v.kind in ("triton", "cuda") or v is family.baseline]
            for variant in variants:
                impl = variant.name + (" (baseline)" if variant is family.baseline else "")
                run = _build(variant.build, case)
                measure(sw, run, nbytes=nbytes, ceilings=(copy, read), case=label, impl=impl, need_s=3.0)
                del run
            del case
            torch.cuda.empty_cache()


def sdpa_call(backend, q, k, v, causal):
    """SDPA pinned to one backend (torch.nn.attention.sdpa_kernel), as a zero-argument call."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def _attention_inputs(b, h, n, d, seed=0):
    import torch

    generator = torch.Generator(device=DEVICE).manual_seed(seed)
    return [
        torch.randn((b, h, n, d), generator=generator, device=DEVICE, dtype=torch.float32).to(torch.bfloat16)
        for _ in range(3)
    ]


def section_check(sw: Sweep) -> None:
    """The Hopper attention against float64 at a ragged N (the masked tail, the pointer-stored last
    block), in both kernel structures, fp16 and bf16."""
    import torch

    from rooflint.core.registry import get_family
    from rooflint.kernels import _attention_hopper as ah

    family = get_family("attention")
    two_loops = next(c for c in ah.SWEEP_CANDIDATES[128] if not c.warp_specialize)
    ws = next(c for c in ah.SWEEP_CANDIDATES[128] if c.warp_specialize)
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    for dtype in dtypes:
        q, k, v = (t.to(dtypes[dtype]) for t in _attention_inputs(2, 3, 300, 128))
        for causal in (False, True):
            reference = family.reference({"q": q, "k": k, "v": v}, {"causal": causal})
            for config in (two_loops, ws):
                run = _build(ah.prepare, q, k, v, causal, config=config)
                case = f"check B2 H3 N300 D128 {dtype} {'causal' if causal else 'non-causal'}"
                measure(sw, run, reference=reference, tolerance=TOLERANCE[dtype], timed=False, need_s=6.0,
                        case=case, impl="hopper vs float64", config=config.label)  # fmt: skip


def section_attention(sw: Sweep) -> None:
    import torch
    from torch.nn.attention import SDPBackend

    from rooflint.core.family import Case
    from rooflint.core.registry import get_family
    from rooflint.kernels import _attention_hopper as ah

    family = get_family("attention")
    device = torch.device(DEVICE)
    best: dict[tuple[int, bool], tuple[float, object]] = {}  # (D, causal) -> (ms, config) from N4096
    for label, b, h, n, d in ATTENTION_CASES:
        q, k, v = _attention_inputs(b, h, n, d)
        for causal in (False, True):
            name = f"{label} {'causal' if causal else 'non-causal'}"
            flops = 4.0 * b * h * n * n * d / (2 if causal else 1)
            common = {"case": name, "flops": flops}
            cudnn = sdpa_call(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)
            flash = sdpa_call(SDPBackend.FLASH_ATTENTION, q, k, v, causal)
            peer = measure(sw, cudnn, impl="sdpa cudnn", **common)
            peer_ms = float(peer["ms"]) if peer.get("ms") else None
            flash_row = measure(sw, flash, impl="sdpa flash (FA2)", peer_ms=peer_ms, **common)
            reference = None  # cuDNN's output, or FA2's where cuDNN does not take the shape
            for row, call in ((peer, cudnn), (flash_row, flash)):
                if row.get("ms"):
                    reference = call().float()
                    break
            check = {"reference": reference, "tolerance": PEER_TOLERANCE if reference is not None else None}
            if d == 128 and "triton" in family.variants:
                case = Case(family, "custom", {"B": b, "H": h, "N": n, "D": d, "causal": causal}, torch.bfloat16,
                            device, {"q": q, "k": k, "v": v})  # fmt: skip
                measure(sw, _build(family.variants["triton"].build, case), impl="triton (sm_80 path)",
                        peer_ms=peer_ms, need_s=15.0, **common, **check)  # fmt: skip
            if n == SWEEP_N:
                configs = ah.SWEEP_CANDIDATES[d]
            else:  # N=16384: the default and the best of the N=4096 sweep
                winner = best.get((d, causal), (None, ah.DEFAULT_CONFIGS[d, causal]))[1]
                configs = tuple(dict.fromkeys((ah.DEFAULT_CONFIGS[d, causal], winner)))
            for config in configs:
                run = _build(ah.prepare, q, k, v, causal, config=config)
                row = measure(
                    sw, run, impl="hopper", config=config.label, peer_ms=peer_ms, need_s=6.0, **common, **check
                )
                if row.get("ms") and n == SWEEP_N:
                    ms = float(row["ms"])
                    if ms < best.get((d, causal), (math.inf, None))[0]:
                        best[(d, causal)] = (ms, config)
            del reference
        del q, k, v
        torch.cuda.empty_cache()
    for (d, causal), (ms, config) in sorted(best.items()):
        sw.add(case=f"best D{d} {'causal' if causal else 'non-causal'}", impl="hopper", config=config.label, ms=ms,
               status="winner", note=f"{config!r}")  # fmt: skip


SECTIONS = {
    "ceilings": lambda sw, out: section_ceilings(sw, out),
    "gemm": lambda sw, out: section_gemm(sw),
    "memory": lambda sw, out: section_memory(sw, out),
    "check": lambda sw, out: section_check(sw),
    "attention": lambda sw, out: section_attention(sw),
}


# ------------------------------------------------------------------------------------- processes


def run_child(part: str, out_dir: Path, budget_s: float) -> None:
    import torch
    import triton

    sw = Sweep(out_dir / f"kernel_sweep_{part}.csv", budget_s)
    props = torch.cuda.get_device_properties(0)
    sw.add(case="device", impl=props.name, note=f"sm_{props.major}{props.minor} {props.multi_processor_count} SMs "
           f"torch {torch.__version__} triton {triton.__version__}", status="ok")  # fmt: skip
    for section in PARTS[part][0].split():
        try:
            SECTIONS[section](sw, out_dir)
        except Exception as error:
            traceback.print_exc()
            sw.add(case=section, status=f"error: {type(error).__name__}: {str(error).splitlines()[0][:160]}")


def summarize(out_dir: Path, parts: list[str]) -> None:
    rows = []
    for part in parts:
        path = out_dir / f"kernel_sweep_{part}.csv"
        if path.exists():
            with path.open() as file:
                rows += list(csv.DictReader(file))
    with (out_dir / "kernel_sweep.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    pct = lambda x: f"{100 * float(x):.1f}" if x else ""
    print(f"\n== kernel_sweep summary ({out_dir / 'kernel_sweep.csv'}) ==")
    print(
        f"{'case':<34} {'impl':<24} {'config':<28} {'ms':>9} {'TFLOP/s':>8} {'GB/s':>7} {'%copy':>6} {'%read':>6} "
        f"{'xpeer':>6} {'err':>8} status"
    )
    for r in rows:
        if r["case"] == "device":
            print(f"device: {r['impl']} {r['note']}")
            continue
        print(
            f"{r['case'][:34]:<34} {r['impl'][:24]:<24} {r['config'][:28]:<28} {r['ms'][:9]:>9} {r['tflops']:>8} "
            f"{r['gbps']:>7} {pct(r['of_copy']):>6} {pct(r['of_read']):>6} {r['vs_peer']:>6} {r['rel_err']:>8} "
            f"{r['status'][:60]}"
        )
    for r in rows:
        if r["status"] == "winner":
            print(f"winner {r['case']}: {r['note']} ({r['ms']} ms, x{r['vs_peer'] or '?'} the peer)")


def plan() -> None:
    """What a GPU run would do, from the tables in the modules (no GPU needed)."""
    from rooflint.kernels import _attention_hopper as ah
    from rooflint.kernels import _gemm_small as gs

    for part, (sections, share) in PARTS.items():
        print(f"part {part}: sections {sections}, budget {share or 'the rest'} s")
    for label, (m, _k, n) in GEMM_SHAPES.items():
        print(f"gemm {label}: choose_tile on 132 SMs -> {gs.choose_tile(m, n, 132).label}")
    for tile in gs.SWEEP_CANDIDATES:
        print(f"gemm candidate {tile.label}")
    for label, *_ in ATTENTION_CASES:
        print(f"attention {label}: causal and not")
    for d, configs in ah.SWEEP_CANDIDATES.items():
        print(
            f"attention D{d} default {ah.DEFAULT_CONFIGS[d, False].label}"
            f" (causal {ah.DEFAULT_CONFIGS[d, True].label}); candidates: " + ", ".join(c.label for c in configs)
        )
    print("memory families: " + ", ".join(MEMORY_FAMILIES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=float(os.environ.get("SWEEP_BUDGET_S", 260)))
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "sweep_out")))
    parser.add_argument("--plan", action="store_true", help="print what would run and exit (no GPU needed)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plan:
        plan()
        return
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        run_child(args.child, args.out, args.budget)
        return
    start = time.monotonic()
    parts = [p for p in args.parts.split(",") if p]
    builds = prebuild_cuda_sources() if "memory" in parts else []  # nvcc runs while part 1 times
    for index, part in enumerate(parts):
        if part == "memory":
            for name, future in builds:
                try:
                    future.result(timeout=max(1.0, args.budget - (time.monotonic() - start) - 60))
                except Exception as error:
                    print(f"nvcc {name}: {str(error)[:200]}", flush=True)
        left = args.budget - (time.monotonic() - start)
        share = PARTS[part][1] if index < len(parts) - 1 and PARTS[part][1] else left
        share = min(share, left)
        if share < 10:
            print(f"part {part}: skipped, {left:.0f} s of the budget left", flush=True)
            continue
        command = [sys.executable, __file__, "--child", part, "--budget", str(share - 5), "--out", str(args.out)]
        print(f"== part {part} ({share:.0f} s) ==", flush=True)
        try:
            # The child stops itself at share - 5 s; the timeout catches a hung kernel.
            subprocess.run(command, timeout=share + 10, check=False)
        except subprocess.TimeoutExpired:
            print(
                f"part {part}: killed after {share + 10:.0f} s (a hung kernel?); its rows so far are kept", flush=True
            )
    summarize(args.out, parts)


if __name__ == "__main__":
    main()
