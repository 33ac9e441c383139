"""The Gluon attention's working-tree source against older sources of itself and cuDNN, in one process.

Builds: the working tree (`gluon`), the working tree with the grid's partial wave run whole
(`gluon_whole`: split_tail=False, _attention_tail.py), and every module given with --old (e.g.
`git show REV:src/rooflint/kernels/_attention_gluon.py`; round 17's FlashAttention-3 ping-pong is
in reports/h200/probe-round17). Each is checked against float64 at ragged N (both masks, fp16 and
bf16, every head dim; B=2, H=3 puts every tile in the split tail, B=1, H=17 splits 4 of 136 on a
132-SM GPU) and for identical bits over repeated calls; then each shape of `bench attention --size large` is timed in
alternating rounds beside SDPA's default (`eager`) and cuDNN, with the bench's own burst timer and
with do_bench's back-to-back calls, and the SM clock NVML reads at the end of each timing.

    python3 scripts/device/attention_ab.py [--old OLD_MODULE.py ...]   # on the GPU; CSVs under $OUT
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path

import torch

from rooflint.kernels import _attention_gluon

ROUNDS = 5
CHECKS = (  # (B, H, N, causal, dtype)
    (2, 3, 777, False, "bf16"), (2, 3, 777, True, "bf16"), (2, 3, 1024, True, "fp16"), (2, 3, 130, False, "fp16"),
    (2, 3, 64, True, "bf16"), (1, 17, 1000, False, "bf16"), (1, 17, 1024, False, "fp16"),
)  # fmt: skip
SHAPES = (  # (B, H, N, D, causal): bench attention --size large
    (4, 32, 4096, 128, False), (4, 32, 4096, 128, True), (1, 32, 16384, 128, True), (4, 64, 4096, 64, False),
    (4, 64, 4096, 64, True), (4, 16, 4096, 256, False), (4, 16, 4096, 256, True),
)  # fmt: skip


def main() -> None:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    parser = argparse.ArgumentParser()
    parser.add_argument("--old", type=Path, action="append", default=[], help="an older attention module to time")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from side_by_side import bench_timer_ms, check_row, do_bench_ms, load_module, output_csv, repeat_row, write_rows

    from rooflint.core.registry import get_family
    from rooflint.engine.nvml import NvmlDevice

    # Each build: a launch factory (q, k, v, causal).
    builds = {
        "gluon": _attention_gluon.prepare,
        "gluon_whole": functools.partial(_attention_gluon.prepare, split_tail=False),
        **{f"old_{path.stem}": load_module(path, f"old_{path.stem}").prepare for path in args.old},
    }
    family = get_family("attention")
    nvml_device = NvmlDevice.open(torch.cuda.current_device())  # the SM clock after each timing
    rows, csv_path = [], output_csv("attention-ab-checks.csv")
    for label, build in builds.items():
        for d in _attention_gluon.HEAD_DIMS:
            for b, h, n, causal, dtype in CHECKS:
                params = {"B": b, "H": h, "N": n, "D": d, "causal": causal}

                def attend(case, causal=causal, build=build):
                    return build(case["q"], case["k"], case["v"], causal)()

                name = f"check {label} D={d} B={b} H={h} N={n} causal={causal} {dtype}"
                check_row(family, params, dtype, attend, name, rows, csv_path, seed=n)
            for b, h, n, causal in ((4, 8, 2048, True), (1, 17, 1024, False)):
                params = {"B": b, "H": h, "N": n, "D": d, "causal": causal}
                case = family.build_case("custom", params, "bf16", torch.device("cuda"), seed=5)
                run = build(case["q"], case["k"], case["v"], causal)
                repeat_row(run, 20, rows, csv_path, f"{label} D={d} B={b} H={h} causal={causal} ")

    timing_rows, timing_path = [], output_csv("attention-ab-timing.csv")
    for b, h, n, d, causal in SHAPES:
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        sdpa = functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal)

        def cudnn(sdpa=sdpa):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return sdpa()

        entries = {"eager": sdpa, "cudnn": cudnn}
        entries.update({label: build(q, k, v, causal) for label, build in builds.items()})
        flops = 4 * b * h * n * n * d / (2 if causal else 1)
        for timer_name, timer in (("burst", bench_timer_ms), ("do_bench", do_bench_ms)):
            times = {label: [] for label in entries}
            clocks = {label: [] for label in entries}
            for _ in range(ROUNDS):
                for label, call in entries.items():
                    times[label].append(timer(call))
                    clocks[label].append(nvml_device.sm_clock_mhz())
            med = {label: statistics.median(t) for label, t in times.items()}
            peer = min(med["eager"], med["cudnn"])
            row = {"shape": f"B={b} H={h} N={n} D={d} causal={int(causal)}", "timer": timer_name,
                   "gpu": torch.cuda.get_device_name(0)}  # fmt: skip
            for label, ms in med.items():
                row[f"{label}_ms"] = round(ms, 4)
                row[f"{label}_tflops"] = round(flops / ms / 1e9, 1)
                row[f"{label}_x_peer"] = round(peer / ms, 4)
                row[f"{label}_clock_mhz"] = statistics.median(clocks[label])
                row[f"{label}_rounds_ms"] = " ".join(f"{t:.4f}" for t in times[label])
            timing_rows.append(row)
            print({key: value for key, value in row.items() if not key.endswith("rounds_ms")}, flush=True)
            write_rows(timing_path, timing_rows)


if __name__ == "__main__":
    main()
