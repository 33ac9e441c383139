#!/usr/bin/env bash
# First look on a lent GPU, before the reference runs: doctor, the GPU test tier, the flush effect,
# and a short bench of a memory-bound and a compute-bound family to see the NVML columns.
set -u
. scripts/device_setup.sh
mkdir -p "$OUT/smoke"
rooflint doctor --json "$OUT/smoke/doctor.json" 2>&1 | tee "$OUT/smoke/doctor.txt" | tail -25
bash scripts/device/gpu_tests.sh 2>&1 | tail -12
timeout 150 python3 scripts/device/flush_effect.py 2>&1 | tail -16
timeout 150 rooflint bench softmax attention --variants eager,triton,sdpa_cudnn --size large --out "$OUT/smoke/bench" 2>&1 | tail -20
python3 - <<'PY'
import pandas as pd, os
f = pd.read_csv(os.environ["OUT"] + "/smoke/bench/results.csv")
print(f[["family","variant","shape","status","median_ms","pct_of_roof","sm_clock_mhz","sm_clock_min_mhz","power_median_w","energy_per_call_j","clock_event_reasons","throttled","throttle_retries","message"]].to_string())
PY
tar -C "$OUT" -czf "$OUT/smoke.tar.gz" smoke
