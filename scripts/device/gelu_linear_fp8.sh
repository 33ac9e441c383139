#!/usr/bin/env bash
# gelu_linear in fp8 on a lent Hopper GPU, in one call of under 5 minutes (docs/quantized.md), from the
# checkout root:
#   bash scripts/device/gelu_linear_fp8.sh
# 1. tests/gpu/test_gelu_linear_fp8_gpu.py: eager (torch._scaled_mm + bias, then F.gelu), triton_fp8
#    (scaled_gemm's Triton kernel, GELU_BIAS epilogue) and cuda_fp8 (scaled_gemm_hopper.cu's GELU
#    instantiation, built at -O3 for sm_90a) against float64 over odd shapes, both fp8 formats, and a
#    repeatability check of each fused kernel;
# 2. rooflint bench gelu_linear at large in fp8_e4m3 (GPT-2's 1024 x 768 -> 3072, its decode step of 8
#    rows, 8192^3); GL8_DTYPES="fp8_e4m3 fp8_e5m2" adds the e5m2 rows;
# 3. a summary: TFLOP/s, % of the fp8 roof, and each variant's speed over eager in the same run.
# Writes to $OUT: gelu-linear-fp8-tests.log, gl8/ (results.csv, results.json), gelu-linear-fp8-summary.txt.
set -u
. scripts/device_setup.sh
out=${OUT:-/tmp/rooflint-gelu-linear-fp8}
mkdir -p "$out"
export TRITON_INTERPRET=0  # the root conftest turns the CPU interpreter on; here kernels run on the GPU
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -1
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
timeout 150 python3 -m pytest -m gpu tests/gpu/test_gelu_linear_fp8_gpu.py -q -s -rs -p no:cacheprovider \
  >"$out/gelu-linear-fp8-tests.log" 2>&1
echo "gpu tests: exit $?: $(grep -E '[0-9]+ (passed|failed)' "$out/gelu-linear-fp8-tests.log" | tail -1)"
grep -E "FAILED|Error|skipped" "$out/gelu-linear-fp8-tests.log" | sort | uniq -c | head -12
grep -E "relative error" "$out/gelu-linear-fp8-tests.log" | awk '{print $2, $NF}' | sort -k1,1 -k2,2g | awk '{max[$1]=$2} END {for (v in max) print "  max relative error", v, max[v]}'
# shellcheck disable=SC2086
timeout "${GL8_BENCH_TIMEOUT:-200}" rooflint bench gelu_linear --size large --dtype ${GL8_DTYPES:-fp8_e4m3} \
  --no-plots --out "$out/gl8" >/tmp/gl8-bench.log 2>&1
echo "bench: exit $?"
tail -3 /tmp/gl8-bench.log
python3 - "$out/gl8/results.csv" <<'PY' | tee "$out/gelu-linear-fp8-summary.txt"
import sys

import pandas as pd

rows = pd.read_csv(sys.argv[1])
ok = rows[rows.status == "ok"]
print("gelu_linear fp8: TFLOP/s (% of the fp8 roof); xE = eager's time / the variant's (same run)")
for (dtype, shape), group in ok.groupby(["dtype", "shape"], sort=False):
    by = group.set_index("variant")
    eager = by.median_ms.get("eager")
    cells = [
        f"{v} {by.achieved_tflops[v]:.0f} ({by.pct_of_roof[v]:.0f}%)" + (f" x{eager / by.median_ms[v]:.3f}" if eager else "")
        for v in by.index
    ]
    print(f"  {dtype} {shape:24} {', '.join(cells)}")
for _, row in rows[rows.status != "ok"].iterrows():
    print(f"  {row['status'].upper()}: {row['variant']} {row['dtype']} {row['shape']}: {str(row['message'])[:200]}")
PY
