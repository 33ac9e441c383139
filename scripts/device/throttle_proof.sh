#!/usr/bin/env bash
# Real throttling, without changing any GPU setting (issue 11): while `rooflint bench` runs, a second
# process on the same GPU runs back-to-back bf16 matmuls that hold it at its power cap. The rows
# measured meanwhile must come out re-timed or marked throttled, with the other process noted.
# Two device calls (each stays under the 10-minute limit), from the checkout root:
#   MODE=clean bash scripts/device/throttle_proof.sh    # the same bench on the idle GPU
#   bash scripts/device/throttle_proof.sh               # under load (+ compare when the clean run is here)
# Each call leaves in $OUT: <mode>.tar.gz (everything), <mode>-results.csv, <mode>-summary.txt, and
# after the loaded run compare.txt/compare.md (when the machine still holds the clean run).
# It never calls nvidia-smi -lgc/-pl or anything else that sets the GPU; it only reads nvidia-smi.
set -u
. scripts/device_setup.sh
families=${FAMILIES:-softmax layernorm attention}
out=/tmp/rooflint-throttle  # kept on the machine between calls, so the loaded run can compare
mkdir -p "$out" "${OUT:=/tmp/rooflint-throttle-out}"
budget=${BUDGET_S:-520}

summarize() {  # one line per run: rows, throttled, re-timed, noted other process, median SM clock
  python3 - "$1" <<'PY'
import sys, pandas as pd
frame = pd.read_csv(sys.argv[1])
ok = frame[frame.status == "ok"]
noted = ok.message.fillna("").str.contains("another process").sum()
print(f"{sys.argv[1]}: {len(frame)} rows, {len(ok)} ok, {int(ok.throttled.astype(str).eq('True').sum())} throttled, "
      f"{int((ok.throttle_retries > 0).sum())} re-timed, {int(noted)} noting another process, "
      f"median SM clock {ok.sm_clock_mhz.median():.0f} MHz (min {ok.sm_clock_min_mhz.min():.0f})")
PY
}

if [ "${MODE:-loaded}" = clean ]; then
  command="rooflint bench $families --size large --out $out/clean"
  echo "$command" >"$out/clean-command.txt"
  timeout "$budget" $command >"$out/clean.log" 2>&1
  echo "clean bench exit $?" | tee -a "$out/clean.log"
  summarize "$out/clean/results.csv" | tee "$out/clean-summary.txt"
  tar -C "$out" -czf "$OUT/clean.tar.gz" clean clean.log clean-command.txt clean-summary.txt
  cp "$out/clean/results.csv" "$OUT/clean-results.csv"
  cp "$out/clean-summary.txt" "$OUT/"
  exit 0
fi

stop="$out/.stop-load"
rm -f "$stop"
python3 - "$stop" "$((budget + 30))" >"$out/load.log" 2>&1 <<'PY' &
import os, sys, time
import torch
stop, limit = sys.argv[1], float(sys.argv[2])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b, c = torch.randn_like(a), torch.empty_like(a)
end, calls = time.time() + limit, 0
while time.time() < end and not os.path.exists(stop):
    for _ in range(10):
        torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    calls += 10
print(f"load process {os.getpid()}: {calls} bf16 8192^3 matmuls back to back")
PY
load_pid=$!
sleep 8  # back-to-back matmuls reach the power cap within a second or two
nvidia-smi -q -d PERFORMANCE,POWER,CLOCK >"$out/gpu-under-load.txt" 2>&1
nvidia-smi >>"$out/gpu-under-load.txt" 2>&1
command="rooflint bench $families --size large --out $out/throttled"
echo "$command   (with a bf16 matmul load in process $load_pid on the same GPU)" >"$out/throttled-command.txt"
timeout "$budget" $command >"$out/throttled.log" 2>&1
echo "throttled bench exit $?" | tee -a "$out/throttled.log"
touch "$stop"
wait "$load_pid"
cat "$out/load.log"
summarize "$out/throttled/results.csv" | tee "$out/throttled-summary.txt"
if [ -f "$out/clean/results.csv" ]; then
  rooflint compare "$out/clean/results.csv" "$out/throttled/results.csv" --out "$out/compare.md" >"$out/compare.txt" 2>&1
  echo "compare exit $?" | tee -a "$out/compare.txt"
  tail -15 "$out/compare.txt"
fi
tar -C "$out" -czf "$OUT/throttled.tar.gz" --exclude=clean --exclude=clean.log .
cp "$out/throttled/results.csv" "$OUT/throttled-results.csv"
cp "$out/throttled-summary.txt" "$OUT/"
cp "$out/compare.txt" "$out/compare.md" "$OUT/" 2>/dev/null || true
