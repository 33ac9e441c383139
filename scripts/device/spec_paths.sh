#!/usr/bin/env bash
# The GPU paths of the one spec API and the thin profile/ceilings commands, end to end on a lent GPU
# (about 4 minutes on an H100): the worker chooses its spec itself (datasheet, then --roof measured
# after `rooflint ceilings` stored this GPU's ceilings), --cuda-graphs and --devices rows, the
# report and lint rebuilding each row's roof, and `rooflint profile --ncu` through run_profile.
#   bash scripts/device/spec_paths.sh        # everything lands in $OUT/spec_paths.tar.gz
set -u
. scripts/device_setup.sh
work=$OUT/spec_paths
mkdir -p "$work"
export ROOFLINT_CACHE=$work/cache
n=0
step() {  # run one command, its output in NN-<command>.log, its exit code in exits.txt
  n=$((n + 1))
  echo "\$ $*" >>"$work/commands.txt"
  "$@" >"$work/$(printf %02d $n)-$2.log" 2>&1
  echo "$(printf %02d $n) $2 exit $?" | tee -a "$work/exits.txt"
}
step rooflint ceilings --out "$ROOFLINT_CACHE/ceilings"
step rooflint bench vector_add softmax --variants eager,triton --size small --out "$work/datasheet"
step rooflint bench vector_add softmax --variants eager,triton --size small --roof measured --out "$work/measured"
step rooflint bench vector_add --variants eager,triton --size small --cuda-graphs --devices 0 --out "$work/graphs"
step rooflint report "$work/measured/results.csv" --format json --out "$work/report.json"
step rooflint lint "$work/measured/results.csv" --roof measured
step rooflint profile softmax -V eager_unfused,triton --size small --ncu --out "$work/profile"
# What to look at: measured/results.csv has ceiling_source=measured and bandwidth_gbps equal to
# ceilings/<gpu>.toml's memory_bandwidth_gbps; graphs/results.csv has timing_mode=cuda_graph and a
# launch_overhead_ms; report.json's section says ceiling_source "measured" with those ceilings.
tar -C "$OUT" -czf "$OUT/spec_paths.tar.gz" spec_paths
cat "$work/exits.txt"
