#!/usr/bin/env bash
# One `rooflint bench all --size large` under the gap census (sitecustomize.py beside this file), with
# doctor before and after: the rows' idle gaps and heats in $OUT/gaps.jsonl, the bench's outputs in
# $OUT/out. Run from the checkout root on a lent GPU, usually as a round.sh step:
#   bash scripts/device/round.sh census 'census=THRESHOLD_S=0.5 bash scripts/device/gap_census/census.sh'
set -u
. scripts/device_setup.sh
export PYTHONPATH=$PWD/scripts/device/gap_census${PYTHONPATH:+:$PYTHONPATH}
export ROOFLINT_GAP_LOG=$OUT/gaps.jsonl ROOFLINT_GAP_THRESHOLD_S=${THRESHOLD_S:-0.5}
rooflint doctor >"$OUT/doctor-before.txt" 2>&1
command="rooflint bench all --size large --out $OUT/out"
echo "$command (ROOFLINT_GAP_THRESHOLD_S=$ROOFLINT_GAP_THRESHOLD_S)" >"$OUT/command.txt"
start=$SECONDS
$command >"$OUT/bench.log" 2>&1
echo "bench exit $? after $((SECONDS - start)) s" >>"$OUT/bench.log"
rooflint doctor >"$OUT/doctor-after.txt" 2>&1
