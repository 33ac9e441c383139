#!/usr/bin/env bash
# The quantized families on a lent GPU (docs/quantized.md), from the checkout root, in two calls of
# under 9 minutes each:
#   bash scripts/device/quantized.sh check    # doctor, the GPU tier of both families, scaled_gemm at large
#   bash scripts/device/quantized.sh decode   # weight_only_gemm at large, then the targets' summary
# Writes to $OUT (at most 8 files come back): doctor.txt, quantized-gpu-tests.log, scaled_gemm.csv,
# weight_only_gemm.csv, quantized-summary.txt. The summary states the two targets: the Triton fp8
# GEMM at 8192^3 against torch._scaled_mm (eager) in the same run, and the weight-only decode GEMM
# against the bf16 skinny kernel at the GPT-2 and Llama-3.2-1B decode shapes (>= 1.6x).
set -u
. scripts/device_setup.sh
out=${OUT:-/tmp/rooflint-quantized}
mkdir -p "$out"
export TRITON_INTERPRET=0  # the root conftest turns the CPU interpreter on; here kernels run on the GPU
stage=${1:-check}
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)
echo "GPU: $gpu"

bench() {  # family, dtypes: results.csv of a large-size bench into $out/<family>.csv
  # Rows reach disk as they finish: a bench cut short by the timeout still leaves its rows to copy.
  timeout "${QUANT_BENCH_TIMEOUT:-420}" rooflint bench "$1" --size large --dtype "$2" --out "/tmp/q-$1" \
    >"/tmp/q-$1.log" 2>&1
  echo "bench $1 ($2): exit $?"
  tail -3 "/tmp/q-$1.log"
  cp "/tmp/q-$1/results.csv" "$out/$1.csv" 2>/dev/null
}

if [ "$stage" = check ]; then
  rooflint doctor >"$out/doctor.txt" 2>&1
  tail -1 "$out/doctor.txt"
  python3 -m pytest -m gpu tests/gpu/test_quantized_gpu.py -q -s -rs -p no:cacheprovider >"$out/quantized-gpu-tests.log" 2>&1
  echo "gpu tests: exit $?: $(grep -E '[0-9]+ (passed|failed)' "$out/quantized-gpu-tests.log" | tail -1)"
  grep -E "FAILED|exceeds" "$out/quantized-gpu-tests.log" | head -10
  bench scaled_gemm fp8_e4m3,fp8_e5m2,int8
else
  bench weight_only_gemm w8a16,wfp8a16
fi

python3 - "$out" <<'PY' | tee -a "$out/quantized-summary.txt"
import sys
from pathlib import Path

import pandas as pd

out = Path(sys.argv[1])
if (out / "scaled_gemm.csv").is_file():
    rows = pd.read_csv(out / "scaled_gemm.csv")
    ok = rows[rows.status == "ok"]
    print("scaled_gemm: TFLOP/s (% of the fp8/int8 roof), triton against eager (torch._scaled_mm / _int_mm)")
    for (dtype, shape), group in ok.groupby(["dtype", "shape"]):
        by = group.set_index("variant")
        cells = [f"{v} {by.achieved_tflops[v]:.0f} ({by.pct_of_roof[v]:.0f}%)" for v in by.index]
        ratio = by.median_ms["eager"] / by.median_ms["triton"] if {"eager", "triton"} <= set(by.index) else float("nan")
        print(f"  {dtype:9} {shape:40} {', '.join(cells)}; triton/eager speed {ratio:.3f}")
    bad = rows[~rows.status.isin(["ok", "skipped"])]
    for _, row in bad.iterrows():
        print(f"  NOT OK: {row.variant} {row.dtype} {row.shape}: {row.status} {row.message}")
if (out / "weight_only_gemm.csv").is_file():
    rows = pd.read_csv(out / "weight_only_gemm.csv")
    ok = rows[rows.status == "ok"]
    print("weight_only_gemm: us, and triton's speed over the bf16 skinny kernel (target >= 1.6x)")
    ratios = []
    for (dtype, shape), group in ok.groupby(["dtype", "shape"], sort=False):
        by = group.set_index("variant").median_ms * 1e3
        if {"triton", "bf16_skinny"} <= set(by.index):
            ratio = by["bf16_skinny"] / by["triton"]
            ratios.append((dtype, ratio))
            cells = ", ".join(f"{v} {t:.2f}" for v, t in by.items())
            print(f"  {dtype:8} {shape:32} {cells}; x{ratio:.2f} over bf16_skinny")
    for dtype in sorted({d for d, _ in ratios}):
        mine = [r for d, r in ratios if d == dtype]
        print(f"  {dtype}: min x{min(mine):.2f}, geomean x{pd.Series(mine).prod() ** (1 / len(mine)):.2f} over {len(mine)} shapes")
    bad = rows[~rows.status.isin(["ok", "skipped"])]
    for _, row in bad.iterrows():
        print(f"  NOT OK: {row.variant} {row.dtype} {row.shape}: {row.status} {row.message}")
PY
