#!/usr/bin/env bash
# Nsight Compute on one launch of the wgmma attention (issue 14), the GPU's own clocks
# (--clock-control none), B4 H32 N4096 D128: tensor pipe, shared-memory traffic, stalls, occupancy.
#   OUT=dir bash scripts/device/attention_hopper_ncu.sh [causal 0|1]
set -u
OUT=${OUT:?set OUT}
causal=${1:-0}
job="{\"family\": \"attention\", \"variant\": \"cuda_hopper\", \"dtype\": \"bf16\", \"size\": \"B=4,H=32,N=4096,D=128,causal=$causal\"}"
timeout 120 ncu --kernel-name regex:attention_hopper --launch-skip 3 --launch-count 1 --clock-control none \
  --target-processes all --section SpeedOfLight --section Occupancy --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SchedulerStats --section LaunchStats \
  --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum \
  -o "$OUT/attention-hopper-c$causal" -f python3 -m rooflint.engine.profile "$job" >"$OUT/ncu-c$causal.log" 2>&1
echo "ncu exit $?"
ncu -i "$OUT/attention-hopper-c$causal.ncu-rep" --page details --csv >"$OUT/attention-hopper-c$causal-details.csv" 2>/dev/null
ncu -i "$OUT/attention-hopper-c$causal.ncu-rep" --page raw --csv --print-units base >"$OUT/attention-hopper-c$causal-raw.csv" 2>/dev/null
rm -f "$OUT/attention-hopper-c$causal.ncu-rep"
