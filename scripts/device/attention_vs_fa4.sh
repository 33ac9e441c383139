#!/usr/bin/env bash
# rooflint's Hopper attention kernels against FlashAttention-4 (issue 41), in one call, at the five
# `--size large` shapes of B4 N4096 (D=64, 128 and 256, non-causal, and D=64 and 128 causal): an
# interleaved `rooflint ab` of cuda_hopper, triton_gluon and flash_attn_4 per shape (5 rounds, burst,
# every entry checked against float64 first), each shape's table and CSV under $OUT. Under 4 minutes
# on an H200 with the CUDA and Gluon builds cold. FA4 travels as peers.sh's pieces (carry .peers1 and
# .peers2 in one call, .peers3 in the next, to the same warm machine); the last call runs this:
#   . scripts/device/peers.sh && bash scripts/device/attention_vs_fa4.sh
# EXTRA_AB_ARGS is added to every ab: EXTRA_AB_ARGS="--config PINGPONG=2,0" makes two cuda_hopper
# entries (the other two take no config and stay one entry each).
set -u
OUT=${OUT:?set OUT to the output directory}
mkdir -p "$OUT"
# The installed package has no .git beside it: every row's git_commit column comes from here.
. scripts/device/git_commit.sh
. scripts/device/peers.sh >"$OUT/peers.log" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation . >"$OUT/install.log" 2>&1 || echo "install failed (see install.log)"
export TRITON_INTERPRET=0
rooflint doctor >"$OUT/doctor.txt" 2>&1
tail -n 1 "$OUT/doctor.txt"
for shape in "64 0 64" "64 1 64" "128 0 32" "128 1 32" "256 0 16"; do
  set -- $shape
  name="D$1-causal$2"
  command="rooflint ab attention -V cuda_hopper,triton_gluon,flash_attn_4 --size B=4,H=$3,N=4096,D=$1,causal=$2 --rounds 5 --regime burst --csv $OUT/$name.csv ${EXTRA_AB_ARGS:-}"
  echo "$command" >>"$OUT/commands.txt"
  timeout 150 $command >"$OUT/$name.txt" 2>&1
  echo "$name: exit $?"
  grep -E "^│ (burst|sustained)" "$OUT/$name.txt"
done
