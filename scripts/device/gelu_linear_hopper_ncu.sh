#!/usr/bin/env bash
# Nsight Compute on one launch of the warp-specialized GEMM (gelu_linear_hopper.cu, issue 14) at
# GPT-2's 1024x768->3072, the GPU's own clocks (--clock-control none).
#   OUT=dir bash scripts/device/gelu_linear_hopper_ncu.sh [variant [kernel-name regex]]
# e.g. `triton_wavefit _gemm_gelu` for the Triton GEMM, `eager nvjet` for cuBLASLt's kernel.
set -u
OUT=${OUT:?set OUT}
variant=${1:-cuda_hopper}
kernel=${2:-gelu_linear}
job="{\"family\": \"gelu_linear\", \"variant\": \"$variant\", \"dtype\": \"bf16\", \"size\": \"m=1024,k=768,n=3072\"}"
timeout 120 ncu --kernel-name "regex:$kernel" --launch-skip 3 --launch-count 1 --clock-control none \
  --target-processes all --section SpeedOfLight --section Occupancy --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SchedulerStats --section LaunchStats \
  -o "$OUT/gelu-linear-$variant" -f python3 -m rooflint.engine.profile "$job" >"$OUT/ncu-$variant.log" 2>&1
echo "ncu exit $?"
ncu -i "$OUT/gelu-linear-$variant.ncu-rep" --page details --csv >"$OUT/gelu-linear-$variant-details.csv" 2>/dev/null
ncu -i "$OUT/gelu-linear-$variant.ncu-rep" --page raw --csv --print-units base >"$OUT/gelu-linear-$variant-raw.csv" 2>/dev/null
rm -f "$OUT/gelu-linear-$variant.ncu-rep"
