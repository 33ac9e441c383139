"""The L2 flush's effect on a timed call, by working-set size: write-only flush vs write-then-read.

A bf16 add c = a + b (working set 3 x n x 2 bytes, 16 MiB to 1 GiB) is timed by rooflint's burst
timer (engine.timing.time_cuda) with the old flush (write a buffer of 2x L2) and the new one (write
it, then read it back, so no dirty flush lines are left for the timed call to write back). Rounds
alternate old and new, so a clock drift shows in both. Run on a GPU from the checkout root:

    . scripts/device_setup.sh && python3 scripts/device/flush_effect.py

Writes $OUT/flush_effect.csv and $OUT/flush_effect.md (a table for docs/perf-notes.md).
"""

from __future__ import annotations

import csv
import os
import statistics
from pathlib import Path

import torch

from rooflint.engine import timing

SIZES_MIB = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
ROUNDS = 5


def main() -> None:
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    l2 = props.L2_cache_size
    write_only, clean = timing.L2Flush(l2, clean=False), timing.L2Flush(l2, clean=True)
    header = (
        f"{props.name}, L2 {l2 / 2**20:.0f} MiB, flush buffer {clean.nbytes / 2**20:.0f} MiB, torch {torch.__version__}"
    )
    print(header, flush=True)
    rows = []
    for mib in SIZES_MIB:
        n = mib * 2**20 // 6  # a, b and c in bf16
        a = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty_like(a)

        def add(a=a, b=b, c=c):
            return torch.add(a, b, out=c)

        old, new = [], []
        for _ in range(ROUNDS):
            old.append(timing.time_cuda(add, l2_bytes=l2, flush=write_only).median_ms)
            new.append(timing.time_cuda(add, l2_bytes=l2, flush=clean).median_ms)
        old_ms, new_ms = statistics.median(old), statistics.median(new)
        row = {
            "working_set_mib": mib,
            "write_only_ms": round(old_ms, 5),
            "write_then_read_ms": round(new_ms, 5),
            "faster_pct": round(100 * (old_ms - new_ms) / old_ms, 2),
            "write_only_gbps": round(6 * n / old_ms / 1e6, 1),
            "write_then_read_gbps": round(6 * n / new_ms / 1e6, 1),
            "spread_old_pct": round(100 * (max(old) - min(old)) / old_ms, 2),
            "spread_new_pct": round(100 * (max(new) - min(new)) / new_ms, 2),
        }
        rows.append(row)
        print(row, flush=True)
        del a, b, c
        torch.cuda.empty_cache()
    with (out / "flush_effect.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        f"bf16 add, rooflint burst timer, median of {ROUNDS} alternating rounds. {header}.",
        "",
        "| working set | write-only flush | write-then-read flush | faster by |",
        "|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['working_set_mib']} MiB | {row['write_only_ms'] * 1e3:.1f} us ({row['write_only_gbps']} GB/s) "
            f"| {row['write_then_read_ms'] * 1e3:.1f} us ({row['write_then_read_gbps']} GB/s) | {row['faster_pct']}% |"
        )
    (out / "flush_effect.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
