#!/usr/bin/env bash
# Where `rooflint bench all --size large` spends its wall time, with cold and then warm caches:
#   MODE=cold  rooflint doctor, then empty the caches (rooflint's reference and nvcc build caches,
#              Triton's, Inductor's: all moved under $CACHES) and run bench      -> $OUT/cold/
#   MODE=warm  the same bench again over the caches the cold run filled         -> $OUT/warm/
#   MODE=all   (default) cold, then warm: two full benches need more than one call's 10 minutes,
#              so pass FAMILIES (arguments) or run MODE=cold and MODE=warm as two calls on the same
#              warm machine (the caches live on its disk between calls).
# Each run prints the summary line (`wall N s: measure ..., compile ..., reference ... (cache: ...)`),
# copies it to $OUT/summary.txt, and keeps results.json, whose "run" record has every phase.
# A run is stopped (SIGINT, rows and results.json kept) after LIMIT_S seconds.
#   MODE=cold bash scripts/device/bench_timing.sh     # then, on the same machine:
#   MODE=warm bash scripts/device/bench_timing.sh
#   bash scripts/device/bench_timing.sh softmax layernorm rope   # both runs, a subset of families
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/bench-timing-out}
MODE=${MODE:-all}
LIMIT_S=${LIMIT_S:-500}
CACHES=${CACHES:-/tmp/rooflint-timing-caches}
mkdir -p "$OUT"
families=("$@")
[ ${#families[@]} -eq 0 ] && families=(all)
# The checkout's sources, as an editable install would: no install step to wait for.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
. scripts/device/git_commit.sh
# Every cache a bench reads, in one place this script can empty.
export ROOFLINT_CACHE=$CACHES/rooflint TRITON_CACHE_DIR=$CACHES/triton TORCHINDUCTOR_CACHE_DIR=$CACHES/inductor
rooflint() { python3 -m rooflint "$@"; }

run_bench() {
  local name=$1
  echo "== $name: rooflint bench ${families[*]} --size large --out $OUT/$name" | tee -a "$OUT/commands.txt"
  local t0=$(date +%s.%N)
  timeout -s INT -k 30 "$LIMIT_S" python3 -m rooflint bench "${families[@]}" --size large --out "$OUT/$name" \
    >"$OUT/$name.log" 2>&1
  local code=$?
  local t1=$(date +%s.%N)
  local line
  line=$(grep '^wall ' "$OUT/$name.log" | tail -1)
  echo "$name exit=$code shell_wall_s=$(python3 -c "print(round($t1 - $t0, 1))") $line" | tee -a "$OUT/summary.txt"
}

if [ "$MODE" = cold ] || [ "$MODE" = all ]; then
  nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
  rooflint doctor >"$OUT/doctor.txt" 2>&1
  tail -1 "$OUT/doctor.txt"
  rm -rf "$CACHES"
  run_bench cold
fi
if [ "$MODE" = warm ] || [ "$MODE" = all ]; then
  run_bench warm
fi
du -sh "$CACHES"/* 2>/dev/null | tee -a "$OUT/summary.txt"
