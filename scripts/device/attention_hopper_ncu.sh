#!/usr/bin/env bash
# Nsight Compute on one launch of a Hopper attention (issue 14), the GPU's own clocks
# (--clock-control none), B4 H32 N4096 D128 (or the head dim given, H scaled to keep the FLOPs):
# tensor pipe, shared-memory traffic, stalls, occupancy.
#   OUT=dir bash scripts/device/attention_hopper_ncu.sh [causal 0|1] [variant] [kernel regex] [head dim]
#   e.g. ... 0 triton_gluon _attn_fwd_ws 64
set -u
OUT=${OUT:?set OUT}
causal=${1:-0}
variant=${2:-cuda_hopper}
kernel=${3:-attention_hopper}
d=${4:-128}
heads=$((32 * 128 / d))
job="{\"family\": \"attention\", \"variant\": \"$variant\", \"dtype\": \"bf16\", \"size\": \"B=4,H=$heads,N=4096,D=$d,causal=$causal\"}"
timeout 120 ncu --kernel-name regex:$kernel --launch-skip 3 --launch-count 1 --clock-control none \
  --target-processes all --section SpeedOfLight --section Occupancy --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SchedulerStats --section LaunchStats \
  --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum \
  -o "$OUT/$variant-d$d-c$causal" -f python3 -m rooflint.engine.profile "$job" >"$OUT/ncu-$variant-d$d-c$causal.log" 2>&1
echo "ncu exit $?"
ncu -i "$OUT/$variant-d$d-c$causal.ncu-rep" --page details --csv >"$OUT/$variant-d$d-c$causal-details.csv" 2>/dev/null
ncu -i "$OUT/$variant-d$d-c$causal.ncu-rep" --page raw --csv --print-units base >"$OUT/$variant-d$d-c$causal-raw.csv" 2>/dev/null
rm -f "$OUT/$variant-d$d-c$causal.ncu-rep"
