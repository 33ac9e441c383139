#!/usr/bin/env bash
# The quantized precisions on a lent GPU (docs/quantized.md), from the checkout root, one stage a call
# (each under 9 minutes): the stage's GPU tests against float64, then `rooflint bench` of its family at
# large in its formats, then one summary: TFLOP/s, % of the roof of the precision the tensor cores run,
# and each variant's speed over the family's baseline (`eager`, or `bf16_skinny` for the weight-only
# GEMM) in the same run.
#   bash scripts/device/quantized.sh check       # doctor; scaled_gemm in fp8_e4m3, fp8_e5m2 and int8 (Triton, the block-scaled Gluon GEMM, cuBLASLt)
#   bash scripts/device/quantized.sh cuda        # scaled_gemm's CUDA wgmma fp8 GEMM and block scales, fp8_e4m3
#   bash scripts/device/quantized.sh gelu        # gelu_linear in fp8 (eager _scaled_mm + GELU, triton_fp8, cuda_fp8)
#   bash scripts/device/quantized.sh attention   # attention in fp8_e4m3 (eager dequantize + SDPA, triton, FA3 where installed)
#   bash scripts/device/quantized.sh decode      # weight_only_gemm in w8a16 and wfp8a16 (target >= 1.6x bf16_skinny)
# For FlashAttention-3/4 rows, source scripts/device/peers.sh on the same warm machine first.
# Writes to $OUT: doctor.txt (check), <stage>-gpu-tests.log, <stage>.csv, <stage>-summary.txt.
set -u
. scripts/device_setup.sh
out=${OUT:-/tmp/rooflint-quantized}
mkdir -p "$out"
stage=${1:-check}
case "$stage" in
  check) family=scaled_gemm dtypes=fp8_e4m3,fp8_e5m2,int8 baseline=eager
    tests="tests/gpu/test_quantized_gpu.py tests/gpu/test_gpu_scaled_gemm_gluon.py" ;;
  cuda) family=scaled_gemm dtypes=fp8_e4m3 tests=tests/gpu/test_scaled_gemm_cuda_gpu.py baseline=eager ;;
  gelu) family=gelu_linear dtypes=fp8_e4m3 tests=tests/gpu/test_gelu_linear_fp8_gpu.py baseline=eager ;;
  attention) family=attention dtypes=fp8_e4m3 tests=tests/gpu/test_attention_fp8_gpu.py baseline=eager ;;
  decode) family=weight_only_gemm dtypes=w8a16,wfp8a16 tests=tests/gpu/test_quantized_gpu.py baseline=bf16_skinny ;;
  *) echo "unknown stage '$stage'; valid: check, cuda, gelu, attention, decode"; exit 2 ;;
esac
describe_gpu
if [ "$stage" = check ]; then
  rooflint doctor >"$out/doctor.txt" 2>&1
  tail -1 "$out/doctor.txt"
fi
# shellcheck disable=SC2086  # $tests: one or more test files
timeout 200 python3 -m pytest -m gpu $tests -q -rs -p no:cacheprovider >"$out/$stage-gpu-tests.log" 2>&1
echo "gpu tests: exit $?: $(grep -E '[0-9]+ (passed|failed)' "$out/$stage-gpu-tests.log" | tail -1)"
grep -E "FAILED|Error" "$out/$stage-gpu-tests.log" | sort | uniq -c | head -10
# Rows reach disk as they finish: a bench cut short by the timeout still leaves its rows to copy.
timeout "${QUANT_BENCH_TIMEOUT:-300}" rooflint bench "$family" --size large --dtype "$dtypes" --no-plots \
  --out "/tmp/q-$stage" >"/tmp/q-$stage.log" 2>&1
echo "bench $family ($dtypes): exit $?"
tail -2 "/tmp/q-$stage.log"
cp "/tmp/q-$stage/results.csv" "$out/$stage.csv" 2>/dev/null

python3 - "$out/$stage.csv" "$baseline" <<'PY' | tee "$out/$stage-summary.txt"
import sys

import pandas as pd

rows, baseline = pd.read_csv(sys.argv[1]), sys.argv[2]
ok = rows[rows.status == "ok"]
print(f"TFLOP/s (% of the roof of the precision the tensor cores run); xB = {baseline}'s time / the variant's")
for (dtype, shape), group in ok.groupby(["dtype", "shape"], sort=False):
    by = group.set_index("variant")
    base = by.median_ms.get(baseline)
    cells = [
        f"{v} {by.achieved_tflops[v]:.0f} ({by.pct_of_roof[v]:.0f}%)" + (f" x{base / by.median_ms[v]:.3f}" if base else "")
        for v in by.index
    ]
    print(f"  {dtype:9} {shape:40} {', '.join(cells)}")
for _, row in rows[rows.status != "ok"].iterrows():
    print(f"  {row['status'].upper()}: {row['variant']} {row['dtype']} {row['shape']}: {str(row['message'])[:200]}")
PY
