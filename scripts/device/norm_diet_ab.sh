#!/usr/bin/env bash
# The CUDA RMSNorm and LayerNorm fast kernels as rewritten for fewer instructions a byte, against the
# previous source (rmsnorm.cu and layernorm.cu at BASE, 631b155 by default), on a lent GPU, in one
# call of under 4 minutes, from the checkout root. The GPU machine gets the tree without .git, so the
# old sources travel as files: make them here, then carry the folder:
#   mkdir -p .norm-old && for f in rmsnorm layernorm; do
#     git show 631b155:src/rooflint/kernels/$f/$f.cu >.norm-old/${f}_old.cu; done
#   bash scripts/device/norm_diet_ab.sh            # with carry [".norm-old"]
# For quack and Liger, first bring the peers onto the same warm machine (scripts/device/peers.sh);
# without them their rows say why they were skipped.
# 1. ptxas's registers and spills for both sources' kernels at the real flags (-O3, this GPU's arch);
# 2. tests/gpu/test_norm_bit_exact_gpu.py: float64 over odd shapes, dtypes, residual, stats, GELU;
# 3. bit-identical outputs (torch.equal on y, h, mean and rstd) of old and new at [16384, 4096] and
#    [1001, 4104] in bf16, fp16 and fp32; then old, new (and quack, Liger) timed by
#    triton.testing.do_bench (L2 flushed before each call, median), 5 rounds with the variants
#    interleaved, at rmsnorm [16384, 4096] bf16 with and without the residual and layernorm
#    [16384, 4096] bf16 with its statistics and with the GELU epilogue.
# Writes to $OUT: norm-diet-ptxas.txt, norm-diet-tests.log, norm-diet-ab.md.
set -u
. scripts/device_setup.sh
out=${OUT:-/tmp/rooflint-norm-diet}
mkdir -p "$out"
export TRITON_INTERPRET=0  # the root conftest turns the CPU interpreter on; here kernels run on the GPU
if [ -d /tmp/peersite ] || ls -d .peers[123] >/dev/null 2>&1; then . scripts/device/peers.sh; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -1

old=$(mktemp -d)
for family in rmsnorm layernorm; do
  if [ -f ".norm-old/${family}_old.cu" ]; then
    cp ".norm-old/${family}_old.cu" "$old/"
  else
    git show "${BASE:-631b155}:src/rooflint/kernels/$family/$family.cu" >"$old/${family}_old.cu" \
      || { echo "no old $family.cu: carry .norm-old (see the header)"; exit 1; }
  fi
done

arch=$(python3 -c "from rooflint.engine.cuda_build import device_arch; print(device_arch())")
python3 - "$arch" "$old" >"$out/norm-diet-ptxas.txt" 2>&1 <<'PY'
import subprocess
import sys
from pathlib import Path

from rooflint.engine.cuda_build import compile_command

arch, old = sys.argv[1], Path(sys.argv[2])
sources = (old / "rmsnorm_old.cu", Path("src/rooflint/kernels/rmsnorm/rmsnorm.cu"),
           old / "layernorm_old.cu", Path("src/rooflint/kernels/layernorm/layernorm.cu"))
builds = []  # the four builds at once: each nvcc is one core's work
for source in sources:
    command = compile_command(source, Path(f"/tmp/ptxas_{source.stem}.so"), arch)
    command[1:1] = ["-Xptxas", "-v"]
    builds.append((source, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
for source, build in builds:
    _, stderr = build.communicate()
    print(f"== {source} (nvcc exit {build.returncode})")
    lines = stderr.splitlines()
    for at, entry in enumerate(lines):
        if "Compiling entry" in entry and "fast_kernel" in entry:
            name = subprocess.run(["c++filt"], input=entry.split("'")[1], capture_output=True, text=True).stdout.strip()
            used = next((line for line in lines[at + 1 : at + 6] if "Used" in line), "?")
            print(f"{name.split('(')[0]}: {used.split('Used ')[-1]}")
    print("\n".join(line for line in lines if "spill" in line and " 0 bytes spill" not in line))
PY
grep -cE "fast_kernel" "$out/norm-diet-ptxas.txt"

timeout 100 python3 -m pytest -m gpu tests/gpu/test_norm_bit_exact_gpu.py -q -rs -p no:cacheprovider -x \
  >"$out/norm-diet-tests.log" 2>&1
echo "gpu tests: exit $?: $(grep -E '[0-9]+ (passed|failed)' "$out/norm-diet-tests.log" | tail -1)"
grep -E "FAILED|Error" "$out/norm-diet-tests.log" | head -8

timeout 110 python3 - "$out/norm-diet-ab.md" "$old" <<'PY'
import statistics
import sys
from pathlib import Path

import torch
import triton.testing

from rooflint.core.registry import get_family
from rooflint.engine import cuda_build
from rooflint.kernels.layernorm.cuda import cuda_layernorm
from rooflint.kernels.rmsnorm.cuda import cuda_rmsnorm

ROUNDS = 5
old_dir = Path(sys.argv[2])
libraries = {
    "old": {f: cuda_build.load(old_dir / f"{f}_old.cu") for f in ("rmsnorm", "layernorm")},
    "new": {f: cuda_build.load(Path(f"src/rooflint/kernels/{f}/{f}.cu")) for f in ("rmsnorm", "layernorm")},
}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def rms_call(which, x, w, residual):
    y, h = torch.empty_like(x), (torch.empty_like(x) if residual is not None else None)
    return lambda: cuda_rmsnorm(libraries[which]["rmsnorm"], x, w, y, residual, h), (y, h)


def ln_call(which, x, w, b, gelu, stats):
    y = torch.empty_like(x)
    mean = torch.empty(x.shape[0], device=x.device) if stats else None
    rstd = torch.empty(x.shape[0], device=x.device) if stats else None
    return lambda: cuda_layernorm(libraries[which]["layernorm"], x, w, b, y, mean, rstd, gelu=gelu), (y, mean, rstd)


def cases(rows, hidden, dtype):
    g = torch.Generator(device="cuda").manual_seed(rows * 7 + hidden)
    x = torch.randn(rows, hidden, device="cuda", generator=g).to(dtype) * 3 + 0.5
    r = torch.randn(rows, hidden, device="cuda", generator=g).to(dtype)
    w = torch.randn(hidden, device="cuda", generator=g).to(dtype)
    b = torch.randn(hidden, device="cuda", generator=g).to(dtype)
    yield f"rmsnorm {rows}x{hidden}", lambda k: rms_call(k, x, w, None)
    yield f"rmsnorm+residual {rows}x{hidden}", lambda k: rms_call(k, x, w, r)
    yield f"layernorm+stats {rows}x{hidden}", lambda k: ln_call(k, x, w, b, False, True)
    yield f"layernorm {rows}x{hidden}", lambda k: ln_call(k, x, w, b, False, False)
    yield f"layernorm_gelu {rows}x{hidden}", lambda k: ln_call(k, x, w, b, True, False)


mismatches, checked = [], 0
for rows, hidden in ((16384, 4096), (1001, 4104), (7, 40), (3, 8)):
    for dname, dtype in DTYPES.items():
        for name, make in cases(rows, hidden, dtype):
            outputs = {}
            for which in ("old", "new"):
                call, outs = make(which)
                call()
                torch.cuda.synchronize()
                outputs[which] = [o.clone() for o in outs if o is not None]
            checked += 1
            for a, b in zip(outputs["old"], outputs["new"]):
                if not torch.equal(a, b):
                    differ = (a != b).sum().item()
                    mismatches.append(f"{name} {dname}: {differ} of {a.numel()} elements differ")
print(f"bit-identical: {checked - len(mismatches)} of {checked} cases", *mismatches[:10], sep="\n")

TIMED = (
    ("rmsnorm", {"rows": 16384, "hidden": 4096, "residual": False}),
    ("rmsnorm", {"rows": 16384, "hidden": 4096, "residual": True}),
    ("layernorm", {"rows": 16384, "hidden": 4096}),
    ("layernorm_gelu", {"rows": 16384, "hidden": 4096}),
)
lines = [
    f"# norm diet on {torch.cuda.get_device_name()}: old (631b155) against new, bf16",
    "",
    f"Bit-identical outputs (torch.equal, y/h/mean/rstd): {checked - len(mismatches)} of {checked} cases"
    + ("" if not mismatches else "; differing: " + "; ".join(mismatches[:6])),
    f"do_bench (L2 flushed, median of its calls), {ROUNDS} rounds interleaved; µs is the median over rounds.",
    "",
    "| op | variant | µs | rounds min-max | GB/s | old µs / variant µs |",
    "|---|---|---|---|---|---|",
]
for family_name, params in TIMED:
    family = get_family(family_name)
    case = family.build_case("large", params, "bf16", torch.device("cuda"))
    x, w = case["x"], case["weight"]
    runs, skipped = {}, {}
    for which in ("old", "new"):
        if family_name == "rmsnorm":
            runs[which] = rms_call(which, x, w, case.inputs.get("residual"))[0]
        else:  # the family's own variant: layernorm writes its statistics, layernorm_gelu does not
            runs[which] = ln_call(which, x, w, case["bias"], family_name == "layernorm_gelu", family_name == "layernorm")[0]
    for peer in ("quack", "liger"):
        if peer not in family.variants:
            continue
        try:
            runs[peer] = family.variants[peer].build(case)
            runs[peer]()
            torch.cuda.synchronize()
        except Exception as why:  # absent or failing peer: its row says why
            skipped[peer] = f"{type(why).__name__}: {str(why).splitlines()[0][:140] if str(why) else ''}"
            runs.pop(peer, None)
    times = {name: [] for name in runs}
    for _ in range(ROUNDS):
        for name, run in runs.items():
            times[name].append(1000 * triton.testing.do_bench(run, warmup=25, rep=100, return_mode="median"))
    moved = family.cost(params, "bf16").bytes
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    op = f"{family_name}{' +residual' if params.get('residual') else ''}"
    for name in runs:
        lines.append(
            f"| {op} | {name} | {medians[name]:.1f} | {min(times[name]):.1f}-{max(times[name]):.1f} "
            f"| {moved / medians[name] / 1e3:,.0f} | {medians['old'] / medians[name]:.3f} |"
        )
    lines += [f"| {op} | {name} | skipped: {why} | | | |" for name, why in skipped.items()]
text = "\n".join(lines) + "\n"
open(sys.argv[1], "w").write(text)
print(text)
sys.exit(1 if mismatches else 0)
PY
echo "bit-exact and timing: exit $?"
rm -rf "$old"
