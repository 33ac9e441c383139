#!/usr/bin/env bash
# GPT-2 124M and GPT-2 medium end to end on one H100 (issue 12): every kernel set (eager, triton,
# cuda, compile) op by op, plus Hugging Face as users run it (SDPA, eager, torch.compile prefill and
# generate), measured in the same process. Writes $OUT/gpt2 and $OUT/gpt2-medium (results.csv/.json,
# model-<config>.md, one roofline per set and phase), $OUT/doctor.txt and $OUT/commands.txt, and
# prints a summary table last. Finishes in under 10 minutes: each model runs under a deadline
# (SIGINT: rows measured so far stay on disk), cheap sets first, the compiling ones last.
#   bash scripts/device/model_gpt2.sh
set -u
OUT=${OUT:?set OUT to the output directory}
began=$SECONDS
budget=${BUDGET_S:-590}  # 9 min 50 s for everything: each set now starts its own process (~10 s more a set)
mkdir -p "$OUT"
# The installed package has no .git beside it: every row's git_commit column comes from here.
. scripts/device/git_commit.sh

# The README install, offline: the image holds torch, triton, transformers and the other dependencies.
python3 -m pip install -q --no-deps --no-build-isolation . >"$OUT/install.log" 2>&1 || echo "install failed (see install.log)"
python3 -c "import transformers; print('transformers', transformers.__version__)" | tee "$OUT/versions.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv >>"$OUT/versions.txt" 2>&1
# The doctor first, alone: its load test and copy would share the GPU with a timed set.
rooflint doctor >"$OUT/doctor.txt" 2>&1 || echo "(rooflint doctor: exit $?)" >>"$OUT/doctor.txt"

# Build the CUDA kernels the cuda set loads, in parallel, and wait for them before anything is
# timed: five nvcc processes beside the timed sets slowed Hugging Face generate (CPU-bound) by a
# third in one run (reports/models/README.md). cuda_build caches each .so.
# Each .cu is found by name in the installed package, wherever its family keeps it; the triton
# set's decode GEMM under PDL is skinny_pdl.cu.
for source in layernorm attention kv_cache decode_attention gelu_linear skinny_pdl; do
  python3 -c "
import sys
from pathlib import Path
import rooflint
from rooflint.engine import cuda_build
cuda_build.load(next(Path(rooflint.__file__).parent.rglob(sys.argv[1] + '.cu')))" "$source" >"$OUT/build-$source.log" 2>&1 &
done
wait

run_model() {  # config, seconds allowed
  local config=$1 allowed=$2
  local command="rooflint model gpt2 --config $config --batch 8 --seq 1024 --prompt 512 --new-tokens 128 --dtype bf16 --kernels eager,compile,triton,cuda --hf-baseline --out $OUT/$config"
  echo "$command" >>"$OUT/commands.txt"
  echo "== $config ($allowed s allowed)"
  timeout -s INT -k 20 "$allowed" $command >"$OUT/$config.log" 2>&1
  echo "exit $? after $((SECONDS - began)) s" | tee -a "$OUT/$config.log"
}

run_model gpt2 $((budget * 56 / 100 - (SECONDS - began)))
run_model gpt2-medium $((budget - (SECONDS - began) - 15))

python3 - "$OUT" <<'EOF'
import sys
from pathlib import Path

import pandas as pd

rows = []
for path in sorted(Path(sys.argv[1]).glob("*/results.csv")):
    frame = pd.read_csv(path, keep_default_na=False)
    steps = frame[frame["shape"].str.startswith("op=step")]
    for _, row in steps.iterrows():
        phase = row["shape"].split("phase=")[1].split(",")[0]
        message = str(row["message"])
        if "tokens_per_s" in frame.columns:  # results with the model columns
            tok_s = f"{float(row['tokens_per_s']):.4g}" if str(row["tokens_per_s"]) not in ("", "nan") else "-"
        else:  # older results: tok/s inside the message
            tok_s = message.split(";")[0].removeprefix("tok/s=") if message.startswith("tok/s=") else "-"
        pct_column = "pct_of_floor" if "pct_of_floor" in frame.columns else "pct_of_roof"
        pct = f"{float(row[pct_column]):.1f}" if str(row[pct_column]) not in ("", "nan") else "-"
        ms = f"{float(row['median_ms']):.4g}" if str(row["median_ms"]) not in ("", "nan") else "-"
        rows.append((row["family"], row["variant"], phase, row["status"], tok_s, ms, pct))
print(f"\n{'model':<18} {'kernels':<12} {'phase':<9} {'status':<7} {'tok/s':>10} {'ms':>10} {'% floor':>8}")
for family, variant, phase, status, tok_s, ms, pct in rows:
    print(f"{family:<18} {variant:<12} {phase:<9} {status:<7} {tok_s:>10} {ms:>10} {pct:>8}")
EOF
