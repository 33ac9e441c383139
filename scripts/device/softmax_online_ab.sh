#!/usr/bin/env bash
# The cuda_online softmax (softmax_online.cu: the row staged in shared memory by cp.async, one (max, sum)
# block merge) against rooflint's `cuda` and `triton` and the library peers, on a lent GPU, in one call
# of under 3 minutes (the steps time out at 60 and 80 s), from the checkout root:
#   bash scripts/device/softmax_online_ab.sh
# For quack and Liger, first bring the peers onto the same warm machine (scripts/device/peers.sh, carry
# .peers1, .peers2, .peers3 in turn); without them their rows say why they were skipped.
# 1. ptxas's registers, spills and shared memory for the kernel at the real flags (-O3, this GPU's arch);
# 2. tests/gpu/test_softmax_online_gpu.py: float64 over odd shapes, dtypes, phases, masks, fallback;
# 3. at [16384, 16384] bf16: cuda_online against float64, then cuda_online, cuda, triton, quack and
#    liger timed by triton.testing.do_bench (L2 flushed before each call, median), 5 rounds with the
#    variants interleaved, so drift in clocks or temperature falls on all of them alike.
# Writes to $OUT: softmax-online-ptxas.txt, softmax-online-tests.log, softmax-online-ab.md.
set -u
. scripts/device_setup.sh
out=${OUT:-/tmp/rooflint-softmax-online}
mkdir -p "$out"
export TRITON_INTERPRET=0  # the root conftest turns the CPU interpreter on; here kernels run on the GPU
if [ -d /tmp/peersite ] || ls -d .peers[123] >/dev/null 2>&1; then . scripts/device/peers.sh; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -1

arch=$(python3 -c "from rooflint.engine.cuda_build import device_arch; print(device_arch())")
python3 - "$arch" >"$out/softmax-online-ptxas.txt" 2>&1 <<'PY'
import subprocess
import sys
from pathlib import Path

from rooflint.engine.cuda_build import compile_command

source = Path("src/rooflint/kernels/softmax/softmax_online.cu")
command = compile_command(source, Path("/tmp/softmax_online_ptxas.so"), sys.argv[1])
command[1:1] = ["-Xptxas", "-v"]
result = subprocess.run(command, capture_output=True, text=True)
print(" ".join(command))
wanted = ("Compiling entry", "Used", "spill")
print("\n".join(line for line in result.stderr.splitlines() if any(word in line for word in wanted)))
PY
grep -E "Used|spill" "$out/softmax-online-ptxas.txt" | head -6

timeout 60 python3 -m pytest -m gpu tests/gpu/test_softmax_online_gpu.py -q -s -rs -p no:cacheprovider \
  >"$out/softmax-online-tests.log" 2>&1
echo "gpu tests: exit $?: $(grep -E '[0-9]+ (passed|failed)' "$out/softmax-online-tests.log" | tail -1)"
grep -E "FAILED|Error|rows resident|widest" "$out/softmax-online-tests.log" | head -12

timeout 80 python3 - "$out/softmax-online-ab.md" <<'PY'
import statistics
import sys

import torch
import triton.testing

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.softmax import cuda_online

ROUNDS = 5
NAMES = ("cuda_online", "cuda", "triton", "quack", "liger")
family = get_family("softmax")
params = {"rows": 16384, "cols": 16384}
case = family.build_case("large", params, "bf16", torch.device("cuda"))
moved = family.cost(params, "bf16").bytes

runs, skipped = {}, {}
for name in NAMES:
    try:
        runs[name] = family.variants[name].build(case)
        runs[name]()
        torch.cuda.synchronize()
    except VariantSkipped as why:
        skipped[name] = str(why).splitlines()[0][:160]
    except Exception as why:  # a peer's own failure (a version's bug) is its row's note, not the run's end
        skipped[name] = f"{type(why).__name__}: {str(why).splitlines()[0][:160] if str(why) else ''}"
        runs.pop(name, None)

reference = family.reference(case.inputs, params)
verdicts = {name: check(family, "bf16", run(), reference) for name, run in runs.items()}
del reference
torch.cuda.empty_cache()

times = {name: [] for name in runs}
for _ in range(ROUNDS):
    for name, run in runs.items():
        times[name].append(1000 * triton.testing.do_bench(run, warmup=25, rep=100, return_mode="median"))

library = cuda_online.load_library()
lines = [
    f"# softmax [16384, 16384] bf16 on {torch.cuda.get_device_name()}",
    "",
    f"cuda_online: {cuda_online.rows_per_sm(library, 16384, torch.bfloat16)} rows resident an SM (occupancy "
    f"calculator); widest staged bf16 row {cuda_online.widest_staged_row(library, torch.bfloat16)} columns.",
    f"do_bench (L2 flushed, median of its calls), {ROUNDS} rounds interleaved; µs is the median over rounds.",
    "",
    "| variant | µs | rounds min-max | GB/s | quack µs / variant µs | relative error vs float64 (tolerance) |",
    "|---|---|---|---|---|---|",
]
medians = {name: statistics.median(ts) for name, ts in times.items()}
for name in runs:
    ratio = f"{medians['quack'] / medians[name]:.3f}" if "quack" in medians else "-"
    verdict = verdicts[name]
    lines.append(
        f"| {name} | {medians[name]:.1f} | {min(times[name]):.1f}-{max(times[name]):.1f} "
        f"| {moved / medians[name] / 1e3:,.0f} | {ratio} "
        f"| {verdict.error:.3g} ({verdict.tolerance:.3g}){'' if verdict.passed else ' FAILED'} |"
    )
lines += [f"| {name} | skipped: {why} | | | | |" for name, why in skipped.items()]
text = "\n".join(lines) + "\n"
open(sys.argv[1], "w").write(text)
print(text)
sys.exit(0 if "cuda_online" in verdicts and verdicts["cuda_online"].passed else 1)
PY
echo "timing: exit $?"
