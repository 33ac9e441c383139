#!/usr/bin/env bash
# Nsight Compute on the memory-bound variants that miss 0.95x the memory ceiling on the H200 (issue 14):
# DRAM bytes and throughput, achieved and theoretical occupancy and what limits it, issue-slot use,
# eligible warps, the busiest SM pipe and the warp stall reasons, per kernel of one timed call
# (rooflint.engine.profile's child: 3 warm-up calls, then the call inside its NVTX range).
# --clock-control none: ncu would otherwise lock the GPU's clocks, a setting rooflint never changes.
# Writes <family>-<variant>-details.csv (ncu --page details), -raw.csv (every metric, base units)
# and a log per variant, and packs everything into $OUT/ncu.tar.gz after each variant, so a run cut
# short still ships what it measured.
#   OUT=dir bash scripts/device/ncu_limiters.sh [family:variant:size | stream ...]
set -u
OUT=${OUT:?set OUT to the output directory}
work=$(mktemp -d)
python3 -m pip install -q --no-deps --no-build-isolation . >"$work/install.log" 2>&1 || echo "install failed"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >"$work/gpu.txt"
for family in layernorm softmax gelu rope kv_cache decode_attention; do  # nvcc, beside the Triton rows
  python3 -c "
from rooflint.engine import cuda_build
from rooflint.kernels import $family as m
cuda_build.load(cuda_build.family_source(m.__file__))" >"$work/build-$family.log" 2>&1 &
done
collect() {  # stem, ncu's kernel filter, "--", the command to profile: one report, exported and packed
  local stem=$1 filter=()
  shift
  while [ "$1" != -- ]; do filter+=("$1"); shift; done
  shift
  timeout 60 ncu "${filter[@]}" --clock-control none --target-processes all \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section LaunchStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
    -o "$work/$stem" -f "$@" >"$work/$stem.log" 2>&1
  echo "$stem exit $?"
  ncu -i "$work/$stem.ncu-rep" --page details --csv >"$work/$stem-details.csv" 2>/dev/null
  ncu -i "$work/$stem.ncu-rep" --page raw --csv --print-units base >"$work/$stem-raw.csv" 2>/dev/null
  rm -f "$work/$stem.ncu-rep"
  tar -C "$work" -czf "$OUT/ncu.tar.gz.part" . && mv "$OUT/ncu.tar.gz.part" "$OUT/ncu.tar.gz"
}
profile() {  # family variant size [ncu filter...]; default filter: the NVTX range of the timed call
  local family=$1 variant=$2 size=$3
  shift 3
  local filter=("$@")
  [ ${#filter[@]} -eq 0 ] && filter=(--nvtx --nvtx-include "$family/$variant/bf16/$size/")
  local job="{\"family\": \"$family\", \"variant\": \"$variant\", \"dtype\": \"bf16\", \"size\": \"$size\"}"
  collect "$family-$variant" "${filter[@]}" -- python3 -m rooflint.engine.profile "$job"
}
stream() {  # the 1:1 stream a read-and-write kernel is held against: torch.neg over 1 GiB of bf16, one
  # vectorized elementwise kernel (a same-dtype copy_ is a memcpy, which ncu does not profile)
  collect stream-torch_neg --kernel-name-base demangled --kernel-name regex:neg_kernel --launch-skip 2 \
    --launch-count 1 -- python3 -c "import torch; x = torch.randn(2**29, device='cuda').bfloat16(); y = torch.empty_like(x)
for _ in range(5): torch.neg(x, out=y)
torch.cuda.synchronize()"
}
gqa=(--kernel-name regex:decode_ --launch-skip 6 --launch-count 2)  # the second large shape: by kernel name
if [ $# -eq 0 ]; then
  set -- layernorm_backward:triton:large "decode_attention:cuda:b=32,h=32,h_kv=8,c=8192,d=128" \
    layernorm_gelu:cuda:large "decode_attention:triton_paged:b=32,h=32,h_kv=8,c=8192,d=128" layernorm_backward:cuda:large
fi
for item in "$@"; do
  if [ "$item" = stream ]; then stream; continue; fi
  IFS=: read -r family variant size <<<"$item"
  if [[ $variant == cuda* ]]; then wait; fi  # a CUDA row waits for the builds
  if [[ $size == *,* ]]; then profile "$family" "$variant" "$size" "${gqa[@]}"; else profile "$family" "$variant" "$size"; fi
done
ls -la "$OUT"
