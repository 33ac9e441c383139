#!/usr/bin/env bash
# The reference run on a lent GPU: `bash scripts/device_bench.sh NAME FAMILY...` benches the
# families at the large size in bf16 and packs everything under $OUT/NAME.tar.gz (the device tool
# returns at most 8 files). Rows reach disk as they finish, so a run cut short still packs them.
set -u
name=$1; shift
. scripts/device_setup.sh
out=$OUT/$name
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$out/gpu.txt"
echo "rooflint bench $* --size large --dtype bf16 --out $out ${EXTRA:-}" > "$out/command.txt"
timeout "${BUDGET_S:-540}" rooflint bench "$@" --size large --dtype bf16 --out "$out" ${EXTRA:-}
echo "bench exit $?"
tar -C "$OUT" -czf "$OUT/$name.tar.gz" "$name"
cp "$out/results.csv" "$OUT/$name-results.csv" 2>/dev/null || true
