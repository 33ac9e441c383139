#!/usr/bin/env bash
# The GPU test tier (pytest marker `gpu`: tests/gpu and the GPU cases of the family tests) on a lent
# GPU, from the checkout root:
#   bash scripts/device/gpu_tests.sh                # the whole tier (more than 30 minutes on an H200)
#   bash scripts/device/gpu_tests.sh tests/gpu/test_gpu_attention_hopper.py ...   # a part of it
# Writes the command, the GPU and pytest's summary line to $OUT/gpu-tests.txt (for reports/), and
# the whole log, with each test's printed measurements and the slowest tests' durations (so that
# the tier can be split across device sessions by time), to $OUT/gpu-tests.log.
set -u
. scripts/device_setup.sh
out=${OUT:-/tmp/rooflint-gpu-tests}
mkdir -p "$out"
if ! python3 -c "import pytest" 2>/dev/null; then
  echo "pytest is not installed on this machine: carry its wheel (and pluggy, iniconfig, packaging) in .whl/" \
    | tee "$out/gpu-tests.txt"
  exit 1
fi
command="python3 -m pytest -m gpu ${*:-tests} -q -s -rs --durations=40 -p no:cacheprovider"
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)
{ echo "\$ $command"; echo "GPU: $gpu"; } >"$out/gpu-tests.log"
$command >>"$out/gpu-tests.log" 2>&1
code=$?
summary=$(grep -E "[0-9]+ (passed|failed|skipped|error)" "$out/gpu-tests.log" | tail -1)
printf '$ %s\nGPU: %s\n%s\nexit %s\n' "$command" "$gpu" "$summary" "$code" >"$out/gpu-tests.txt"
cat "$out/gpu-tests.txt"
grep -E "FAILED|ratio|us, after|relative error .* exceeds" "$out/gpu-tests.log" | tail -20
exit $code
