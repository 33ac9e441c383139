#!/usr/bin/env bash
# How a fleet scales, on one host of 2 or 4 GPUs, in calls of under 9 minutes each:
#   MODE=one   rooflint doctor, then `rooflint bench FAMILIES --size large` on GPU 0 alone
#              (CUDA_VISIBLE_DEVICES=0)                                   -> $OUT/one/
#   MODE=fleet `rooflint bench FAMILIES --size large --scheduler local` over every GPU, then
#              `rooflint compare` of it against the one-GPU run (3%)      -> $OUT/fleet/
#              The one-GPU run is $BASE (a results.csv, e.g. from an earlier MODE=one call),
#              else $OUT/one/results.csv.
#   MODE=warm  `rooflint bench FAMILIES --size large` on GPU 0 alone again, over the caches MODE=one
#              filled (warm Triton, Inductor, nvcc and reference caches)          -> $OUT/warm/
#   MODE=hosts two simulated hosts of two workers each (a `dask scheduler` and `dask worker`s
#              started by hand, named hostN-gpuI, ROOFLINT_HOST=hostN, resources GPU=1 and the GPU
#              type); one worker killed once its first row is in: its task runs again on a peer of
#              the same type; rows name their host and device                -> $OUT/hosts/
#   MODE=all   (default) one, then fleet, then hosts, each as far as the time allows: with every
#              family one GPU alone takes about 8 minutes, so give all only to MODE=one and
#              MODE=fleet in calls of their own, and a few families to MODE=all.
# Wall times go to $OUT/walls.txt and the speed-up to $OUT/summary.txt. FAMILIES (arguments, default
# all) keeps a call within its limit: e.g. `bash scripts/device/fleet_scale.sh softmax layernorm rope`.
# Caches: MODE=one and MODE=fleet each start from empty caches of their own (rooflint's, Triton's,
# Inductor's, under $CACHES/one and $CACHES/fleet), so that their wall times compare cold with cold
# whatever ran before them on the machine; MODE=warm reuses $CACHES/one.
# Carry the Dask wheels where the machine has no index: carry [".whl"] (dask distributed tornado
# tblib zict partd locket cloudpickle toolz ...).
#   MODE=one bash scripts/device/fleet_scale.sh            # then, on the same warm machine:
#   MODE=fleet bash scripts/device/fleet_scale.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fleet-scale-out}
MODE=${MODE:-all}
# A stage's limit (and at most what is left of BUDGET_S, default 520): SIGINT then, so bench keeps
# its rows and writes results.json; the wall time of a stage cut short says so in walls.txt (exit 130).
LIMIT_S=${LIMIT_S:-480}
CACHES=${CACHES:-/tmp/fleet-scale-caches}
mkdir -p "$OUT"
families=("$@")
[ ${#families[@]} -eq 0 ] && families=(all)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl ||
    { echo "wheel install failed"; exit 1; }
fi
# The checkout's sources, as an editable install would: no install step to wait for.
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
. scripts/device/git_commit.sh
start=$SECONDS
left() { echo $((${BUDGET_S:-520} - (SECONDS - start))); } # seconds left of this device call
rooflint() { python3 -m rooflint "$@"; }
nvidia-smi -L >"$OUT/gpus.txt"
# Point every cache a bench reads at $CACHES/NAME; emptied first unless the second argument is "keep".
use_caches() {
  [ "${2:-}" = keep ] || rm -rf "${CACHES:?}/$1"
  export ROOFLINT_CACHE=$CACHES/$1/rooflint TRITON_CACHE_DIR=$CACHES/$1/triton TORCHINDUCTOR_CACHE_DIR=$CACHES/$1/inductor
}

# SIGKILL a process and every process below it, by process id (a dask worker: nanny, worker, measuring process).
kill_tree() {
  python3 -c '
import sys, psutil
top = psutil.Process(int(sys.argv[1]))
for process in [top, *top.children(recursive=True)]:
    try:
        process.kill()
    except psutil.Error:
        pass
' "$1" 2>/dev/null
}

# One stage: the command, its wall time from the shell, its exit code.
stage() {
  local name=$1
  shift
  echo "== $name: $*" | tee -a "$OUT/commands.txt"
  local t0=$(date +%s.%N) limit=$(($(left) - 20))
  limit=$((limit > LIMIT_S ? LIMIT_S : limit))
  timeout -s INT -k 30 "$((limit < 30 ? 30 : limit))" "$@" >"$OUT/$name.log" 2>&1
  local code=$?
  local t1=$(date +%s.%N)
  echo "$name exit=$code wall_s=$(python3 -c "print(round($t1 - $t0, 1))")" | tee -a "$OUT/walls.txt"
  tail -3 "$OUT/$name.log"
}

run_one() {
  cat "$OUT/gpus.txt"
  rooflint doctor >"$OUT/doctor.txt" 2>&1
  tail -1 "$OUT/doctor.txt"
  use_caches one
  stage one env CUDA_VISIBLE_DEVICES=0 python3 -m rooflint bench "${families[@]}" --size large --out "$OUT/one"
}

run_warm() {
  use_caches one keep
  stage warm env CUDA_VISIBLE_DEVICES=0 python3 -m rooflint bench "${families[@]}" --size large --out "$OUT/warm"
}

run_fleet() {
  local base=${BASE:-$OUT/one/results.csv}
  for ((gpu = 0; gpu < $(nvidia-smi -L | wc -l); gpu++)); do
    CUDA_VISIBLE_DEVICES=$gpu python3 -m rooflint doctor >"$OUT/doctor-gpu$gpu.txt" 2>&1
    echo "doctor gpu$gpu: $(tail -1 "$OUT/doctor-gpu$gpu.txt")"
  done
  use_caches fleet
  stage fleet python3 -m rooflint bench "${families[@]}" --size large --scheduler local --out "$OUT/fleet"
  if [ -f "$base" ]; then
    # --threshold 3: no row of the fleet slower or faster than the one-GPU run by more than 3%.
    rooflint compare "$base" "$OUT/fleet/results.csv" --threshold 3% --out "$OUT/compare.md" >"$OUT/compare.txt" 2>&1
    echo "compare exit=$?" | tee -a "$OUT/walls.txt"
    tail -5 "$OUT/compare.txt"
  else
    echo "no one-GPU run at $base: no compare" | tee -a "$OUT/walls.txt"
  fi
}

run_hosts() {
  local work=$OUT/hosts port=8786 gpus label
  mkdir -p "$work"
  gpus=$(nvidia-smi -L | wc -l)
  label=$(python3 -c "import torch; from rooflint.engine.fleet.resources import label_for; print(label_for(torch.cuda.get_device_name(0)))")
  # Every retry is rooflint's (fleet/client.py); Dask's default would re-run a lost task silently.
  DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0 python3 -m distributed.cli.dask_scheduler \
    --host 127.0.0.1 --port $port --no-dashboard >"$work/scheduler.log" 2>&1 &
  local pids=($!)
  for ((gpu = 0; gpu < gpus; gpu++)); do
    local host=host$((gpu / 2)) # two workers, two GPUs, per simulated host
    CUDA_VISIBLE_DEVICES=$gpu ROOFLINT_HOST=$host python3 -m distributed.cli.dask_worker tcp://127.0.0.1:$port \
      --name "$host-gpu$gpu" --nthreads 1 --memory-limit 0 --no-dashboard \
      --resources "GPU=1,gpu-$label=1" >"$work/worker-gpu$gpu.log" 2>&1 &
    pids+=($!)
    echo "CUDA_VISIBLE_DEVICES=$gpu ROOFLINT_HOST=$host dask worker tcp://127.0.0.1:$port --name $host-gpu$gpu --nthreads 1 --memory-limit 0 --resources GPU=1,gpu-$label=1" >>"$OUT/commands.txt"
  done
  # Kill worker host0-gpu1 (its nanny, worker and measuring process) once a row of it is in the
  # CSV: it is then mid-task, with rows of its task left to measure.
  (
    for _ in $(seq 1 1500); do
      if [ -f "$work/bench/results.csv" ] && python3 - "$work/bench/results.csv" <<'EOF'; then
import csv, sys
sys.exit(0 if any(r["device_index"] == "1" for r in csv.DictReader(open(sys.argv[1]))) else 1)
EOF
        echo "$(date -u +%T) killing worker host0-gpu1 (pid ${pids[2]}) and every process below it" | tee -a "$work/kill.txt"
        kill_tree "${pids[2]}"
        exit 0
      fi
      sleep 0.2
    done
  ) &
  local killer=$!
  stage hosts python3 -m rooflint bench softmax layernorm rmsnorm gelu rope --size large \
    --scheduler tcp://127.0.0.1:$port --gpu-types "$label" --out "$work/bench"
  kill "$killer" 2>/dev/null
  for pid in "${pids[@]}"; do kill_tree "$pid"; done
  grep -E "died|again|lost" "$work/bench/fleet.log" | tee "$work/retries.txt"
}

case $MODE in
one) run_one ;;
warm) run_warm ;;
fleet) run_fleet ;;
hosts) run_hosts ;;
all)
  run_one
  run_fleet
  [ "$(left)" -gt 120 ] && run_hosts
  ;;
*)
  echo "MODE must be one, warm, fleet, hosts or all (got $MODE)"
  exit 2
  ;;
esac

python3 - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import csv, os, sys
from collections import Counter
from pathlib import Path

out = Path(sys.argv[1])
walls = {}
if (out / "walls.txt").exists():
    for line in (out / "walls.txt").read_text().splitlines():
        name, _, rest = line.partition(" ")
        fields = dict(part.split("=", 1) for part in rest.split() if "=" in part)
        walls[name] = fields
for name in ("one", "warm", "fleet", "hosts"):
    path = out / name / "results.csv" if name != "hosts" else out / "hosts" / "bench" / "results.csv"
    if not path.exists():
        continue
    rows = list(csv.DictReader(open(path)))
    places = Counter((r["host"], r["device_name"], r["device_index"]) for r in rows)
    print(f"{name}: {walls.get(name, {})} rows {len(rows)} ok {sum(r['status'] == 'ok' for r in rows)}; "
          f"rows per (host, device, index): {dict(places)}")
one = float(walls.get("one", {}).get("wall_s", "nan"))
fleet = float(walls.get("fleet", {}).get("wall_s", "nan"))
gpus = len([line for line in (out / "gpus.txt").read_text().splitlines() if line.strip()]) if (out / "gpus.txt").exists() else 0
if one == one and fleet == fleet:
    print(f"speed-up of the fleet over one GPU: {one / fleet:.2f}x on {gpus or os.environ.get('GPUS', '?')} GPUs")
warm = float(walls.get("warm", {}).get("wall_s", "nan"))
if warm == warm:
    print(f"one GPU with warm caches: {warm:.1f} s")
EOF
echo "total wall $((SECONDS - start)) s"
