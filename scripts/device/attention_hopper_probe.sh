#!/usr/bin/env bash
# One device call for the wgmma attention (issue 14): install, doctor, the GPU tests of the kernel,
# then the attention family's large rows for cuda_hopper beside cuDNN, triton and cuda, same run.
#   bash scripts/device/attention_hopper_probe.sh        (writes under $OUT)
set -u
out=${OUT:-/tmp/rooflint-attention-hopper}
mkdir -p "$out"
python3 -m pip install -q --no-deps --no-build-isolation . >"$out/install.log" 2>&1 || { cat "$out/install.log"; exit 1; }
rooflint doctor >"$out/doctor.txt" 2>&1; echo "doctor exit $?" >>"$out/doctor.txt"; tail -3 "$out/doctor.txt"
export TRITON_INTERPRET=0
timeout ${TEST_S:-240} python3 -m pytest -m gpu tests/gpu/test_gpu_attention_hopper.py -q -s -x -p no:cacheprovider \
  >"$out/gpu-tests.log" 2>&1
echo "tests exit $?"; grep -E "passed|failed|Error|error" "$out/gpu-tests.log" | tail -8
command="rooflint bench attention --size large --variants cuda_hopper,sdpa_cudnn,cuda --out $out/bench"
echo "$command" >"$out/command.txt"
timeout ${BENCH_S:-240} $command >"$out/bench.log" 2>&1
echo "bench exit $?"
python3 - "$out/bench/results.csv" <<'PY'
import sys
import pandas as pd
df = pd.read_csv(sys.argv[1])
cols = [c for c in ("variant", "shape", "status", "median_ms", "achieved_tflops", "message") if c in df.columns]
pd.set_option("display.width", 250, "display.max_colwidth", 80)
print(df[cols].to_string(index=False))
PY
