#!/usr/bin/env bash
# weight_only_gemm's Triton stream on a lent GPU, in one call of about 4 minutes (docs/perf-notes/quantized.md):
#   bash scripts/device/weight_only_sweep.sh
# 1. the GPU tier of weight_only_gemm (float64 checks over odd shapes, both formats: the e4m3 bit
#    dequantization's inline PTX runs only on a GPU);
# 2. weight_only_sweep.py: at the GPT-2, Llama-3.2-1B and one Llama-3-8B decode shape, in both
#    formats, the new kernel (plan()'s tile), its tile alternatives, the earlier kernel's tile and
#    Triton's fp8 cast, beside the bf16 skinny kernel, in alternating rounds; and the timer's per-call floor.
# Writes to $OUT: weight-only-gpu-tests.log, sweep.csv, weight-only-summary.txt.
set -u
. scripts/device_setup.sh
out=${OUT:-/tmp/rooflint-weight-only}
mkdir -p "$out"
export TRITON_INTERPRET=0  # the root conftest turns the CPU interpreter on; here kernels run on the GPU
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout 120 python3 -m pytest -m gpu tests/gpu/test_quantized_gpu.py -k weight_only -q -rs -p no:cacheprovider \
  >"$out/weight-only-gpu-tests.log" 2>&1
echo "gpu tests: exit $?: $(grep -E '[0-9]+ (passed|failed)' "$out/weight-only-gpu-tests.log" | tail -1)"
grep -E "FAILED|Error" "$out/weight-only-gpu-tests.log" | head -10
timeout "${SWEEP_TIMEOUT:-420}" python3 scripts/device/weight_only_sweep.py "$out" "${SWEEP_ROUNDS:-2}" 2>&1 \
  | tee "$out/weight-only-summary.txt" | grep -vE "^checked|^round"
echo "sweep: exit ${PIPESTATUS[0]}"
