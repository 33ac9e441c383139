"""Device script for issue 5 (measurement): ceilings, ncu metric discovery, tensor-counter
calibration, CUDA-graph timing check and an ncu profile. Each step is independent: one failing
step does not stop the rest. Usage: python3 scripts/dev/measurement.py OUT STEP..."""

import os
import subprocess
import sys
import time

OUT = sys.argv[1]
STEPS = sys.argv[2:]


def sh(name, command, timeout):
    started = time.time()
    print(f"=== {name}: {command}", flush=True)
    try:
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=timeout)
        text = done.stdout + done.stderr
        code = done.returncode
    except subprocess.TimeoutExpired as error:
        out = error.stdout or ""
        text, code = (out.decode(errors="replace") if isinstance(out, bytes) else out), "timeout"
    with open(os.path.join(OUT, f"{name}.log"), "w") as log:
        log.write(text)
    lines = [line for line in text.splitlines() if "USDT" not in line]
    print("\n".join(lines[-25:]), flush=True)
    print(f"=== {name}: exit {code} in {time.time() - started:.0f}s", flush=True)


CALIBRATE = r"""
import torch, sys
n = int(sys.argv[1])
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16); b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
x = torch.randn(1 << 24, device="cuda")
for _ in range(3): torch.mm(a, b); x * 1.5 + 0.5
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("calib")
torch.mm(a, b)
torch.addcmul(x, x, x)
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
"""

GRAPH = r"""
import torch
from rooflint.engine import timing
from rooflint.engine.graph_timing import time_cuda_graph
for n in (1 << 12, 1 << 16, 1 << 20, 1 << 26):
    a = torch.randn(n, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a); c = torch.empty_like(a)
    fn = lambda: torch.add(a, b, out=c)
    ev = timing.time_cuda(fn, l2_bytes=50 * 2**20)
    gr = time_cuda_graph(fn, l2_bytes=50 * 2**20)
    print(f"vector add n={n}: events {ev.median_ms * 1e3:.2f} us (p20 {ev.p20_ms*1e3:.2f} p80 {ev.p80_ms*1e3:.2f}),",
          f"graph {gr.median_ms * 1e3:.2f} us/call (p20 {gr.p20_ms*1e3:.2f} p80 {gr.p80_ms*1e3:.2f}),",
          f"overhead {(ev.median_ms - gr.median_ms) * 1e3:.2f} us")
"""

if "metrics" in STEPS:
    pattern = "^(sm__ops_path_tensor|sm__inst_executed_pipe_tensor|smsp__inst_executed_pipe_tensor)"
    sh(
        "metrics",
        f"ncu --version; ncu --query-metrics > {OUT}/metrics.txt; grep -c . {OUT}/metrics.txt; "
        f"grep -E '{pattern}' {OUT}/metrics.txt | cut -c1-150",
        60,
    )
if "calibrate" in STEPS:
    with open(f"{OUT}/calibrate.py", "w") as f:
        f.write(CALIBRATE)
    tensor = f"$(grep -oE '^sm__ops_path_tensor[a-z0-9_]*' {OUT}/metrics.txt | sed 's/$/.sum/' | paste -sd, -)"
    ops = ("fadd", "fmul", "ffma", "hadd", "hmul", "hfma")
    base = "dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum," + ",".join(
        f"sm__sass_thread_inst_executed_op_{o}_pred_on.sum" for o in ops
    )
    profile = f"ncu --nvtx --nvtx-include 'calib/' --export {OUT}/calib -f"
    program = f"python3 {OUT}/calibrate.py 4096"
    report = f"ncu --import {OUT}/calib.ncu-rep --csv --print-units base"
    sh(
        "calibrate",
        f"({profile} --metrics {base},{tensor} {program} || {profile} --metrics {base} {program}) "
        f"&& {report} --page raw > {OUT}/calib.csv; head -c 600 {OUT}/calib.csv; "
        f"{report} --page details | grep -vE ',\"0\"$' | cut -c1-220 | head -80",
        90,
    )
if "ceilings" in STEPS:
    sh("ceilings", f"rooflint ceilings --out {OUT}/ceilings", 80)
if "graph" in STEPS:
    with open(f"{OUT}/graph.py", "w") as f:
        f.write(GRAPH)
    sh("graph", f"python3 {OUT}/graph.py", 60)
for family in ("softmax", "layernorm", "attention", "gelu"):
    if family in STEPS:
        command = f"rooflint profile {family} -V eager_unfused -V triton --size large --ncu --out {OUT}/ncu_{family}"
        sh(f"ncu_{family}", command, 110)
