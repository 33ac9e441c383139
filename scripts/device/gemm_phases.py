"""Where GPT-2's GEMM spends its 13 us: the Gluon GEMM's phases, stamped inside the kernel, and the
kernels timed beside cuBLASLt (and beside older sources of themselves, with --old).

Every implementation at GPT-2's 1024x768 -> 3072 (cuBLASLt's, our Gluon, Triton and CUDA GEMMs) runs a
13.3 us body under ncu, while its tensor work is ~9,200 cycles an SM (5 us) and its DRAM bytes 4 us.
This script asks the kernel where the rest goes: each CTA of a traced launch (prepare's `trace`,
after the bench's L2 flush) records %globaltimer and %clock64 stamps at its start, when each K
step's bytes have landed, when each consumer's last wgmma retires, when its TMA stores are issued and
when they are done. Each build is checked against float64 at ragged shapes and for repeatable bits
first. Round 16 timed three other designs here, kept in history only (reports/h200/probe-round16):
an L2 prefetch of X and W at the kernel's start (5d96421), the consumers' K loops in turn, and GELU
stored from registers with no shared-memory staging (both in notes and probe data only).

    python3 scripts/device/gemm_phases.py [--old OLD_KERNEL_MODULE.py ...]   # on the GPU; CSVs under $OUT
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from rooflint.kernels import _gemm_gluon

SHAPES = {"gpt2": (1024, 768, 3072), "gpt2_m2048": (2048, 768, 3072), "8192": (8192, 8192, 8192)}
ROUNDS = 9
TRACED_LAUNCHES = 5
CHECKS = ((130, 72, 200), (257, 776, 384), (1500, 264, 2000), (1024, 768, 3072))


def phases(trace: torch.Tensor, ctas: int, k_steps: int) -> list[dict]:
    """One row a CTA: its launch skew and finish (ns from the first CTA's start) and its phases in
    cycles of its SM's clock (consumer 0's, and consumer 1's where they differ)."""
    fields = _gemm_gluon.TRACE_FIELDS
    stamps = trace.view(-1, _gemm_gluon.TRACE_SLOTS)[:ctas].cpu().tolist()
    first_ns = min(row[fields.index("ns_start")] for row in stamps)
    steps = min(k_steps, _gemm_gluon.TRACE_STEPS)
    rows = []
    for cta, row in enumerate(stamps):
        get = dict(zip(fields, row, strict=False))
        landed = row[len(fields) : len(fields) + steps]
        span_ns = get["ns_end"] - get["ns_start"]
        rows.append({
            "cta": cta,
            "start_ns": get["ns_start"] - first_ns,
            "end_ns": get["ns_end"] - first_ns,
            "ghz": (get["c1_stores_done"] - get["start"]) / span_ns if span_ns > 0 else float("nan"),
            "producer_start_cyc": get["producer_start"] - get["start"],
            "first_bytes_cyc": landed[0] - get["start"],
            "c0_mma_done_cyc": get["mma_done"] - get["start"],
            "c0_math_and_issue_cyc": get["stores_issued"] - get["mma_done"],
            "c0_store_wait_cyc": get["stores_done"] - get["stores_issued"],
            "c1_mma_done_cyc": get["c1_mma_done"] - get["start"],
            "c1_math_and_issue_cyc": get["c1_stores_issued"] - get["c1_mma_done"],
            "c1_store_wait_cyc": get["c1_stores_done"] - get["c1_stores_issued"],
            "end_cyc": max(get["stores_done"], get["c1_stores_done"]) - get["start"],
            "producer_issue_cyc": get["producer_done"] - get["producer_start"],
            **{f"step{k}_cyc": landed[k] - landed[k - 1] for k in range(1, steps)},
        })  # fmt: skip
    return rows


def summary(label: str, rows: list[dict]) -> dict:
    """Medians over CTAs of every phase, and the span from the first start to the last finish."""
    out = {"launch": label, "ctas": len(rows), "span_ns": max(r["end_ns"] for r in rows)}
    for key in rows[0]:
        if key != "cta":
            out[f"median_{key}"] = statistics.median(r[key] for r in rows)
    out["max_start_ns"] = max(r["start_ns"] for r in rows)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", type=Path, action="append", default=[], help="an older GEMM module to time")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from side_by_side import bench_timer_ms, check_row, load_module, output_csv, repeat_row, time_rounds, write_rows

    # Older GEMM modules with a `prepare(x, w, b)` (e.g. `git show REV:src/rooflint/kernels/_gemm_gluon.py`).
    olds = {f"old_{path.stem}": load_module(path, f"old_{path.stem}").prepare for path in args.old}

    from rooflint.core.registry import get_family
    from rooflint.engine.timing import l2_flush
    from rooflint.kernels import _gemm_small, gelu_linear

    family = get_family("gelu_linear")
    rows, csv_path = [], output_csv("gemm-phases-checks.csv")
    # Each build: a launch factory (x, w, b, **options). Only this source's default is traced.
    builds = {"gluon": _gemm_gluon.prepare, **olds}
    for label, build in builds.items():
        for traced in (False, True) if label == "gluon" else (False,):
            for m, k, n in CHECKS:
                for dtype in ("bf16", "fp16"):

                    def gemm(case, build=build, traced=traced):
                        x, w = case["x"], case["w"]
                        trace = {"trace": _gemm_gluon.trace_buffer(x.shape[0], w.shape[0], x.device)} if traced else {}
                        return build(x, w, case["b"], **trace)()

                    name = f"check {label} trace={traced} {m}x{k}->{n} {dtype}"
                    check_row(family, {"m": m, "k": k, "n": n}, dtype, gemm, name, rows, csv_path, seed=m + n)
        case = family.build_case("custom", {"m": 1024, "k": 2048, "n": 3072}, "bf16", torch.device("cuda"), seed=3)
        repeat_row(build(case["x"], case["w"], case["b"]), 30, rows, csv_path, f"{label} ")

    flush = l2_flush(torch.cuda.get_device_properties(0).L2_cache_size)
    cta_rows, summaries = [], []
    timing_rows, timing_path = [], output_csv("gemm-phases-timing.csv")
    for label, (m, k, n) in SHAPES.items():
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        entries = {
            "cublaslt": lambda x=x, w=w, b=b: gelu_linear.fused_epilogue(x, w, b),
            **{key: build(x, w, b) for key, build in builds.items()},
            "wavefit": _gemm_small.prepare(x, w, b),
        }
        times = time_rounds(entries, ROUNDS if m < 8192 else 3, timer=bench_timer_ms)
        med = {key: statistics.median(value) for key, value in times.items()}
        row = {"shape": f"{label} {m}x{k}->{n}", "gpu": torch.cuda.get_device_name(0)}
        for key, ms in med.items():
            row[f"{key}_us"] = round(ms * 1e3, 3)
            row[f"{key}_x_cublaslt"] = round(med["cublaslt"] / ms, 4)
            row[f"{key}_rounds_us"] = " ".join(f"{t * 1e3:.2f}" for t in times[key])
        timing_rows.append(row)
        print(row, flush=True)
        write_rows(timing_path, timing_rows)

        if m >= 8192:
            continue  # timed only: its many waves are not what the trace is for
        k_tiles = -(-k // _gemm_gluon.BLOCK_K)
        trace = _gemm_gluon.trace_buffer(m, n, "cuda")
        run = _gemm_gluon.prepare(x, w, b, trace=trace)
        run()  # compiled and warm
        for launch in range(TRACED_LAUNCHES):
            flush(launch)
            trace.zero_()
            torch.cuda.synchronize()
            run()
            torch.cuda.synchronize()
            name = f"{label} #{launch}"
            found = phases(trace, _gemm_gluon.cta_count(m, n), k_tiles)
            cta_rows += [{"launch": name, **r} for r in found]
            summaries.append(summary(name, found))
            print({key: round(v, 1) if isinstance(v, float) else v for key, v in summaries[-1].items()}, flush=True)
        write_rows(output_csv("gemm-phases-ctas.csv"), cta_rows)
        write_rows(output_csv("gemm-phases-summary.csv"), summaries)


if __name__ == "__main__":
    main()
