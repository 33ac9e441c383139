"""Is torch's copy the fastest copy this GPU sustains? On the H200 every kernel that writes as many
bytes as it reads stops at 0.946-0.948 of the read stream, where torch's own copy stops too
(docs/perf-notes/kernels-at-limit.md). If some copy ran faster, that cap would be the copy's, not the
memory's. This times torch's copy beside Triton copies that vary what a copy can vary (bytes in
flight per thread, programs per SM, warps, the load and store cache hints), and the read stream
`rooflint ceilings` measures, on 2 GiB buffers with the same event timer. Every copy is checked
(dst == src) before it is timed. Writes copies.csv under $OUT.

    python3 scripts/device/copy_streams.py
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import torch
import triton
import triton.language as tl
from side_by_side import write_rows

from rooflint.engine import ceiling_kernels
from rooflint.engine.ceilings import _event_median_ms

GIB = 2.0
BLOCK = 2048  # fp32 per load: 8 KB a program step, 16 bytes a thread at 4 warps


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n_groups, BLOCK: tl.constexpr, UNROLL: tl.constexpr, STREAM: tl.constexpr):
    # Groups of UNROLL blocks dealt round-robin, as the read stream deals them.
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    # One [UNROLL, BLOCK] tile: each thread issues UNROLL 16-byte loads before its stores.
    offs = tl.arange(0, UNROLL)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    for i in range(0, tl.cdiv(n_groups - pid, programs)):
        base = (pid.to(tl.int64) + i * programs) * (BLOCK * UNROLL)
        if STREAM:
            # .cg: L2 only (each byte is read once); .cs: streaming, the written line is evicted first.
            tl.store(dst_ptr + base + offs, tl.load(src_ptr + base + offs, cache_modifier=".cg"), cache_modifier=".cs")
        else:
            tl.store(dst_ptr + base + offs, tl.load(src_ptr + base + offs))


def main() -> None:
    out_dir = Path(os.environ.get("OUT", "/tmp/copy-streams"))
    out_dir.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    n = int(GIB * 2**30) // 4
    src = torch.rand(n, device="cuda")
    dst = torch.empty_like(src)
    rows = []

    def add(name: str, fn, moved_bytes: int) -> None:
        ms = _event_median_ms(fn, reps=30)
        rows.append({"stream": name, "ms": ms, "gbps": moved_bytes / (ms * 1e-3) / 1e9})
        print(rows[-1], flush=True)

    add("torch copy_ (rooflint ceilings' copy)", lambda: dst.copy_(src), 2 * n * 4)
    read = ceiling_kernels.read_gbps(n * 4, sms, _event_median_ms)
    rows.append({"stream": "read stream (rooflint ceilings)", "gbps": read})
    print(rows[-1], flush=True)
    for unroll, per_sm, warps, stream in itertools.product((1, 2, 4), (4, 8, 16), (4, 8), (False, True)):
        n_groups = n // (BLOCK * unroll)
        grid = (sms * per_sm,)
        name = f"triton unroll {unroll}, {per_sm}/SM, {warps} warps" + (", .cg/.cs" if stream else "")

        def launch(grid=grid, n_groups=n_groups, unroll=unroll, warps=warps, stream=stream):
            _copy_kernel[grid](src, dst, n_groups, BLOCK=BLOCK, UNROLL=unroll, STREAM=stream, num_warps=warps)

        dst.zero_()
        launch()
        torch.cuda.synchronize()
        if not torch.equal(dst, src):
            rows.append({"stream": name, "status": "wrong copy"})
            continue
        add(name, launch, 2 * n * 4)
    for row in rows:
        row["of_read_stream"] = row["gbps"] / read if "gbps" in row else ""
        row["gpu"] = props.name
    write_rows(out_dir / "copies.csv", rows)
    best = max((r for r in rows if "triton" in r["stream"] and "gbps" in r), key=lambda r: r["gbps"])
    print(f"best copy {best['stream']}: {best['gbps']:.0f} GB/s, {best['gbps'] / read:.3f} of the read stream")


if __name__ == "__main__":
    main()
