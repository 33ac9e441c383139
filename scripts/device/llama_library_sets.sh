#!/usr/bin/env bash
# The Llama family's library kernel sets (issue 42: liger, flashinfer, fa4) on one GPU: their GPU tier
# against Hugging Face, then llama-3.2-1b at B=8 with the triton set beside them, bf16, random
# weights, prefill T=1024, prompt 512 + 128 new tokens. Under 6 minutes; writes $OUT.
# The libraries travel as peers.sh's three pieces (carry .peers1, .peers2, .peers3, one a call, to
# the same warm machine); the last call runs this:
#   . scripts/device/peers.sh && bash scripts/device/llama_library_sets.sh
set -u
OUT=${OUT:?set OUT to the output directory}
mkdir -p "$OUT"
# The installed package has no .git beside it: every row's git_commit column comes from here.
. scripts/device/git_commit.sh
. scripts/device/peers.sh >"$OUT/peers.log" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation . >"$OUT/install.log" 2>&1 || echo "install failed (see install.log)"
python3 - <<'PY' | tee "$OUT/versions.txt"
import importlib
for module in ("torch", "transformers", "liger_kernel", "flashinfer", "flash_attn.cute"):
    try:
        print(module, getattr(importlib.import_module(module), "__version__", "(imported)"))
    except Exception as error:  # noqa: BLE001 - the set will say the same and skip
        print(module, "not importable:", type(error).__name__, str(error).splitlines()[0][:120])
PY
TRITON_INTERPRET=0 timeout 150 python3 -m pytest -q -m gpu -rs tests/gpu/test_llama_library_sets_gpu.py >"$OUT/gpu-tests.log" 2>&1
echo "library sets GPU tier: exit $? ($(tail -n 1 "$OUT/gpu-tests.log"))"
command="rooflint model llama-3.2-1b --batch 8 --seq 1024 --prompt 512 --new-tokens 128 --kernels triton,liger,flashinfer,fa4 --no-plots --out $OUT/llama-3.2-1b"
echo "$command" >"$OUT/commands.txt"
timeout -s INT -k 20 170 $command >"$OUT/llama-3.2-1b.log" 2>&1
echo "rooflint model: exit $? (tables in llama-3.2-1b.log, rows in llama-3.2-1b/results.csv)"
grep -E "^(│|\|)? *(triton|liger|flashinfer|fa4) " "$OUT/llama-3.2-1b.log" | head -n 24
