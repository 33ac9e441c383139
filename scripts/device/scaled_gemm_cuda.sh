#!/usr/bin/env bash
# scaled_gemm's CUDA wgmma fp8 GEMM and per-block scales on a lent Hopper GPU, in one call of under
# 5 minutes (docs/quantized.md), from the checkout root:
#   bash scripts/device/scaled_gemm_cuda.sh
# 1. builds scaled_gemm_hopper.cu (-O3, sm_90a) and runs tests/gpu/test_scaled_gemm_cuda_gpu.py: the
#    CUDA kernel against float64 over odd shapes, both fp8 formats, both tile widths, a repeatability
#    check; the block-scaled Triton kernel and torch._scaled_mm's block-wise form against float64;
# 2. rooflint bench scaled_gemm at large in fp8_e4m3 (8192^3 per tensor, per row and per block, and
#    GPT-2's 1024 x 768 -> 3072): eager (torch._scaled_mm), eager_unfused, triton and cuda;
# 3. a summary: TFLOP/s, % of the fp8 roof, and each variant's speed over eager in the same run.
# Writes to $OUT: scaled-gemm-cuda-tests.log, sg/ (results.csv, results.json), scaled-gemm-cuda-summary.txt.
set -u
. scripts/device_setup.sh
out=${OUT:-/tmp/rooflint-scaled-gemm-cuda}
mkdir -p "$out"
export TRITON_INTERPRET=0  # the root conftest turns the CPU interpreter on; here kernels run on the GPU
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -1
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
timeout 150 python3 -m pytest -m gpu tests/gpu/test_scaled_gemm_cuda_gpu.py -q -s -rs -p no:cacheprovider \
  >"$out/scaled-gemm-cuda-tests.log" 2>&1
echo "gpu tests: exit $?: $(grep -E '[0-9]+ (passed|failed)' "$out/scaled-gemm-cuda-tests.log" | tail -1)"
grep -E "FAILED|Error|skipped:" "$out/scaled-gemm-cuda-tests.log" | sort | uniq -c | head -12
timeout "${SG_BENCH_TIMEOUT:-200}" rooflint bench scaled_gemm --size large --dtype fp8_e4m3 --no-plots --out "$out/sg" \
  >/tmp/sg-bench.log 2>&1
echo "bench: exit $?"
tail -3 /tmp/sg-bench.log
python3 - "$out/sg/results.csv" <<'PY' | tee "$out/scaled-gemm-cuda-summary.txt"
import sys

import pandas as pd

rows = pd.read_csv(sys.argv[1])
ok = rows[rows.status == "ok"]
print("scaled_gemm fp8_e4m3: TFLOP/s (% of the fp8 roof); xE = eager's time / the variant's (same run)")
for shape, group in ok.groupby("shape", sort=False):
    by = group.set_index("variant")
    eager = by.median_ms.get("eager")
    cells = [
        f"{v} {by.achieved_tflops[v]:.0f} ({by.pct_of_roof[v]:.0f}%)" + (f" x{eager / by.median_ms[v]:.3f}" if eager else "")
        for v in by.index
    ]
    print(f"  {shape:45} {', '.join(cells)}")
for _, row in rows[rows.status != "ok"].iterrows():
    print(f"  {row['status'].upper()}: {row['variant']} {row['shape']}: {str(row['message'])[:200]}")
PY
