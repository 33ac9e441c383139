#!/usr/bin/env bash
# Nsight Compute on the memory-bound variants that miss 0.95x the memory ceiling on the H200 (issue 14):
# DRAM bytes and throughput, achieved and theoretical occupancy and what limits it, issue-slot use
# and eligible warps, per kernel of one timed call (rooflint.engine.profile's child, 3 warm-up calls
# first). --clock-control none: ncu would otherwise lock the GPU's clocks, a setting rooflint never
# changes. Writes <family>-<variant>-details.csv (ncu --page details) and a log per variant.
#   OUT=dir bash scripts/device/ncu_limiters.sh
set -u
mkdir -p $OUT
python3 -m pip install -q --no-deps --no-build-isolation . > $OUT/install.log 2>&1 || echo install failed
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt
rooflint doctor > $OUT/doctor.txt 2>&1 &
for family in layernorm decode_attention; do
  python3 -c "
from rooflint.engine import cuda_build
from rooflint.kernels import $family as m
cuda_build.load(cuda_build.family_source(m.__file__))" > $OUT/build-$family.log 2>&1 &
done
wait
tail -1 $OUT/doctor.txt
run() {  # family variant size [filter...]: default the NVTX range of the one timed call
  local stem="$1-$2"
  local job="{\"family\": \"$1\", \"variant\": \"$2\", \"dtype\": \"bf16\", \"size\": \"$3\"}"
  shift 3
  local filter=("$@")
  [ ${#filter[@]} -eq 0 ] && filter=(--nvtx --nvtx-include "${job_family}/${job_variant}/bf16/large/")
  timeout 100 ncu "${filter[@]}" --clock-control none --target-processes all \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
    --section SchedulerStats --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
    -o $OUT/$stem -f python3 -m rooflint.engine.profile "$job" > $OUT/$stem.log 2>&1
  echo "$stem exit $?"
  ncu -i $OUT/$stem.ncu-rep --page details --csv > $OUT/$stem-details.csv 2>/dev/null
  ncu -i $OUT/$stem.ncu-rep --page raw --csv --print-units base > $OUT/$stem-raw.csv 2>/dev/null
}
job_family=layernorm_backward job_variant=triton run layernorm_backward triton large
# GQA is the second large shape: filter by kernel name, after the child's 3 warm-up calls (2 kernels each)
run decode_attention cuda "b=32,h=32,h_kv=8,c=8192,d=128" --kernel-name regex:decode_ --launch-skip 6 --launch-count 2
job_family=layernorm_gelu job_variant=cuda run layernorm_gelu cuda large
run decode_attention triton_paged "b=32,h=32,h_kv=8,c=8192,d=128" --kernel-name regex:_decode_ --launch-skip 6 --launch-count 2
job_family=layernorm_backward job_variant=cuda run layernorm_backward cuda large
cd $OUT && tar czf ncu-h200.tar.gz *.ncu-rep *-raw.csv && rm -f *.ncu-rep *-raw.csv
ls -la $OUT
