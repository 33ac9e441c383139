#!/usr/bin/env bash
# A bench's wall time with builds ahead and the conditional cool-down, cold then warm, on one GPU, in
# under 8 minutes: `rooflint bench softmax rmsnorm layernorm attention --size large` twice over one
# set of caches (scripts/device/bench_timing.sh does the runs), then
#   - each run's summary line and run record (phases, caches, builds ahead) -> $OUT/summary.txt, run-*.json
#   - the rows of the warm run against the cold one (the cold run's nvcc builds ran beside its first
#     rows: a row they moved shows here) and both against the committed H100 reference
#     (reports/h100/results.csv, these families' rows)                       -> $OUT/compare-*.md
#   - how many burst rows skipped the full cool-down (their previous row never hit the power cap)
#                                                                            -> $OUT/cool.txt
#   bash scripts/device/bench_speed.sh              # writes under $OUT
#   LIMIT_S=200 bash scripts/device/bench_speed.sh  # each bench stopped (rows kept) after LIMIT_S s
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/bench-speed-out}
export OUT LIMIT_S=${LIMIT_S:-200} CACHES=${CACHES:-/tmp/rooflint-speed-caches}
FAMILIES=(softmax rmsnorm layernorm attention)
mkdir -p "$OUT"
nproc >"$OUT/nproc.txt"
MODE=all bash scripts/device/bench_timing.sh "${FAMILIES[@]}"
export PYTHONPATH=$PWD/src
for run in cold warm; do
  python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['run'], indent=1))" \
    "$OUT/$run/results.json" >"$OUT/run-$run.json" 2>&1
done
python3 -m rooflint compare "$OUT/cold/results.csv" "$OUT/warm/results.csv" --threshold 3% \
  --out "$OUT/compare-cold-warm.md" >"$OUT/compare-cold-warm.log" 2>&1
echo "compare cold -> warm exit=$?" | tee -a "$OUT/summary.txt"
if [ -f reports/h100/results.csv ]; then
  python3 -m rooflint compare reports/h100/results.csv "$OUT/warm/results.csv" --threshold 3% \
    --out "$OUT/compare-reference-warm.md" >"$OUT/compare-reference-warm.log" 2>&1
  echo "compare reference -> warm exit=$? (an H100 reference; on another GPU no row joins)" | tee -a "$OUT/summary.txt"
fi
# Rows whose own samples saw the power cap are followed by the full cool-down; the rest are not.
python3 - "$OUT" <<'EOF' | tee "$OUT/cool.txt"
import csv, sys
for run in ("cold", "warm"):
    rows = [r for r in csv.DictReader(open(f"{sys.argv[1]}/{run}/results.csv")) if r["status"] == "ok"]
    capped = sum("sw_power_cap" in (r.get("clock_event_reasons") or "") for r in rows)
    print(f"{run}: {len(rows)} ok rows, {capped} at the power cap (the next row cools fully), {len(rows) - capped} not")
EOF
grep -h "" "$OUT/summary.txt"
