#!/usr/bin/env bash
# The Llama family's targets on one H100 (issue 42): `rooflint doctor`, then per model every kernel
# set (eager, triton, cuda, compile) op by op with Hugging Face beside it (SDPA, eager,
# torch.compile prefill, generate, and the static cache + torch.compile(mode="reduce-overhead")
# decode step), bf16, random weights, prefill at T=1024, prompt 512 + 128 new tokens:
#   llama-3.2-1b at B=8, llama-3.1-8b at B=1, gpt2-medium at B=8.
# Each model writes $OUT/<name> (results.csv/.json, model-<config>.md, rooflines) under its own
# deadline (SIGINT: the rows measured so far stay on disk), and a headline table is printed last:
# tok/s, % of floor and which floor binds per set and phase, and the triton set's ratio to each peer.
#   bash scripts/device/model_llama.sh                 # all three (about 25 minutes: one call each below)
#   bash scripts/device/model_llama.sh llama-3.2-1b    # one of them, under 10 minutes in all
#   GPU_TESTS=1 BUDGET_S=0 bash scripts/device/model_llama.sh llama-3.2-1b   # the llama GPU tier alone (<= 4 min)
#   bash scripts/device/model_llama.sh quantized       # llama-3.2-1b's triton decode with bf16, int8 and fp8
#     weights (--weights-dtype, issue 44; about 6 minutes): decode tok/s of each against bf16's (target >= 1.4x)
#   GPU_TESTS=1 BUDGET_S=0 bash scripts/device/model_llama.sh quantized      # its GPU tier alone (<= 4 min)
set -u
OUT=${OUT:?set OUT to the output directory}
began=$SECONDS
budget=${BUDGET_S:-470}  # per model: 7 min 50 s, so install, doctor and the nvcc build fit one 10-minute call
mkdir -p "$OUT"
# The installed package has no .git beside it: every row's git_commit column comes from here.
. scripts/device/git_commit.sh
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(llama-3.2-1b llama-3.1-8b gpt2-medium)
for name in "${models[@]}"; do
  case $name in
    llama-3.2-1b | llama-3.1-8b | gpt2-medium | quantized) ;;
    *) echo "unknown model $name; valid: llama-3.2-1b, llama-3.1-8b, gpt2-medium, quantized" >&2; exit 2 ;;
  esac
done

# The README install, offline: the image holds torch, triton, transformers and the other dependencies.
python3 -m pip install -q --no-deps --no-build-isolation . >"$OUT/install.log" 2>&1 || echo "install failed (see install.log)"
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)" | tee "$OUT/versions.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv >>"$OUT/versions.txt" 2>&1
# The doctor first, alone: its load test would share the GPU with a timed set.
rooflint doctor >"$OUT/doctor.txt" 2>&1 || echo "(rooflint doctor: exit $?)" >>"$OUT/doctor.txt"
tail -n 1 "$OUT/doctor.txt"

# The decode GEMMs under PDL (bf16: gelu_linear/skinny_pdl.cu and skinny_ring.cu; int8 and fp8 weights:
# weight_only_gemm/cuda.cu) are built once before anything is timed (cuda_build caches the .so); the
# Llama set loads no other CUDA source.
python3 -c "
from pathlib import Path
import rooflint
from rooflint.engine import cuda_build
kernels = Path(rooflint.__file__).parent / 'kernels'
for source in (kernels / 'gelu_linear' / 'skinny_pdl.cu', kernels / 'gelu_linear' / 'skinny_ring.cu',
               kernels / 'weight_only_gemm' / 'cuda.cu'):
    cuda_build.load(source)" >"$OUT/build-decode-gemms.log" 2>&1

if [ "${GPU_TESTS:-0}" = 1 ]; then
  tier=tests/gpu/test_model_llama_gpu.py
  [ "${models[0]}" = quantized ] && tier=tests/gpu/test_model_quantized_gpu.py
  TRITON_INTERPRET=0 timeout 240 python3 -m pytest -q -m gpu $tier >"$OUT/gpu-tests.log" 2>&1
  echo "llama GPU tier: exit $? ($(tail -n 1 "$OUT/gpu-tests.log"))"
fi

[ "$budget" -le 0 ] && exit 0
if [ "${models[0]}" = quantized ]; then
  # The same model, kernels and shape three times, only the decode projections' weights differ.
  for weights in bf16 int8 fp8; do
    command="rooflint model llama-3.2-1b --batch 8 --prompt 512 --new-tokens 128 --kernels triton --weights-dtype $weights --no-plots --out $OUT/quantized-$weights"
    echo "$command" >>"$OUT/commands.txt"
    started=$SECONDS
    timeout -s INT -k 20 150 $command >"$OUT/quantized-$weights.log" 2>&1
    echo "$weights: exit $? after $((SECONDS - started)) s"
  done
  python3 - "$OUT" <<'EOF'
import sys
from pathlib import Path

import pandas as pd

out, decode = Path(sys.argv[1]), {}
for weights in ("bf16", "int8", "fp8"):
    path = out / f"quantized-{weights}" / "results.csv"
    if not path.exists():
        print(f"{weights}: no results.csv (see quantized-{weights}.log)")
        continue
    frame = pd.read_csv(path, keep_default_na=False)
    rows = frame[(frame["variant"] == "triton") & (frame["phase"] == "decode") & frame["shape"].str.startswith("op=step")]
    for _, row in rows.iterrows():
        decode[weights] = float(row["tokens_per_s"] or "nan")
        print(f"{weights:<5} decode {row['status']:<7} {decode[weights]:>10.5g} tok/s  {row['median_ms']} ms  "
              f"{row['pct_of_floor']}% of floor  {str(row['message'])[:100]}")
for weights in ("int8", "fp8"):
    if weights in decode and decode.get("bf16"):
        print(f"{weights} / bf16 decode tok/s: {decode[weights] / decode['bf16']:.2f}x (target >= 1.4x)")
EOF
  grep -h "decode logits rel err" "$OUT"/quantized-*.log | cut -c1-200
  exit 0
fi
for name in "${models[@]}"; do
  batch=8
  [ "$name" = llama-3.1-8b ] && batch=1
  command="rooflint model $name --batch $batch --seq 1024 --prompt 512 --new-tokens 128 --dtype bf16 --hf-baseline --out $OUT/$name"
  echo "$command" >>"$OUT/commands.txt"
  started=$SECONDS
  echo "== $name ($budget s allowed)"
  timeout -s INT -k 20 "$budget" $command >"$OUT/$name.log" 2>&1
  echo "exit $? after $((SECONDS - started)) s" | tee -a "$OUT/$name.log"
done
echo "total $((SECONDS - began)) s"

python3 - "$OUT" "${models[@]}" <<'EOF'
import math
import sys
from pathlib import Path

import pandas as pd

out, models = Path(sys.argv[1]), sys.argv[2:]


def number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


for name in models:
    path = out / name / "results.csv"
    if not path.exists():
        print(f"\n{name}: no results.csv (see {name}.log)")
        continue
    frame = pd.read_csv(path, keep_default_na=False)
    steps = frame[frame["shape"].str.startswith("op=step") & ~frame["shape"].str.contains("sweep=1")]
    print(f"\n{name}")
    print(f"{'variant':<28} {'phase':<9} {'status':<8} {'tok/s':>10} {'ms':>9} {'% floor':>8} {'bound':<8}")
    tok = {}
    for _, row in steps.iterrows():
        t, ms, pct = number(row["tokens_per_s"]), number(row["median_ms"]), number(row["pct_of_floor"])
        tok[(row["variant"], row["phase"])] = t
        cells = [f"{v:.4g}" if math.isfinite(v) else "-" for v in (t, ms)] + [f"{pct:.1f}" if math.isfinite(pct) else "-"]
        print(f"{row['variant']:<28} {row['phase']:<9} {row['status']:<8} {cells[0]:>10} {cells[1]:>9} {cells[2]:>8} "
              f"{row['bound']:<8} {str(row['message'])[:60] if row['status'] != 'ok' else ''}")
    for phase, peers in (("prefill", ("hf_sdpa", "hf_compile", "compile")),
                         ("decode", ("hf_static_compile", "compile", "eager")),
                         ("generate", ("hf_generate", "hf_static_compile_generate"))):
        ours = tok.get(("triton", phase), math.nan)
        for peer in peers:
            theirs = tok.get((peer, phase), math.nan)
            if math.isfinite(ours) and math.isfinite(theirs) and theirs > 0:
                print(f"  triton {phase} / {peer}: {ours / theirs:.2f}x")
EOF
