#!/usr/bin/env bash
# The fleet's wall time alone, on a 2-GPU host (nvidia-h200-x2, carry [".whl"]): one
# `rooflint bench all --size large --scheduler local` over both GPUs, cold caches, timed from the
# shell. Compare with a one-GPU `rooflint bench all --size large` (reports/h200, same machine kind).
#   bash scripts/device/fleet_wall.sh
set -u
OUT=${OUT:-/tmp/fleet-wall-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl ||
  { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$OUT/gpus.txt"
command="rooflint bench all --size large --scheduler local --out $OUT/fleet"
echo "$command" >"$OUT/command.txt"
t0=$(date +%s.%N)
timeout -s INT -k 30 "${LIMIT_S:-240}" python3 -m rooflint bench all --size large --scheduler local --out "$OUT/fleet" >"$OUT/fleet.log" 2>&1
code=$?
t1=$(date +%s.%N)
echo "fleet exit=$code wall_s=$(python3 -c "print(round($t1 - $t0, 1))")" | tee "$OUT/wall.txt"
grep -E "started on|finished on|again|died" "$OUT/fleet/fleet.log" | head -3
python3 - "$OUT/fleet/results.csv" <<'PY' | tee -a "$OUT/wall.txt"
import csv, sys
from collections import Counter
rows = list(csv.DictReader(open(sys.argv[1])))
print(len(rows), "rows;", Counter(r["status"] for r in rows), Counter(r["device_index"] for r in rows))
PY
tar -C "$OUT" -czf "$OUT/fleet_wall.tar.gz" fleet fleet.log gpus.txt command.txt wall.txt
