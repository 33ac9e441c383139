#!/usr/bin/env bash
# Fleet proof on one host with two GPUs (the device tool's nvidia-h200-x2), in one call of < 9 min:
#   (a) rooflint bench all --size large --scheduler local         both GPUs, cold caches  -> fleet/
#   (b) the same with --devices 0                                 one GPU, warm caches    -> one/
#   (c) `dask scheduler` + two `dask worker`s started by hand as separate processes, each pinned to
#       its GPU and labelled with its type; a bench against them; worker gpu1's whole process
#       group killed once its first row is in: its task runs again on gpu0      -> cluster/
#   (d) if time is left: (a) again with warm caches, for a like-for-like wall time   -> fleet-warm/
# then a summary (wall times, rows per GPU, schema, times of (a) against (b)) in summary.txt.
# Carry the Dask wheels: run with carry [".whl"] (dask distributed tornado tblib zict partd locket).
#   bash scripts/device/fleet_x2.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fleet-out}
work=/tmp/fleet-proof
rm -rf "$work" && mkdir -p "$work" "$OUT"
start=$SECONDS
budget=${BUDGET_S:-530}
left() { echo $((budget - (SECONDS - start))); }
# A stage's limit: what is left after `reserve` seconds for the stages after it, within [60, cap].
limit() { local l=$(($(left) - $1)); l=$((l > $2 ? $2 : l)); echo $((l < 60 ? 60 : l)); }
# SIGKILL a process and every process below it (a dask worker: nanny, worker, measuring process).
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

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl ||
  { echo "wheel install failed"; exit 1; }
# The checkout's sources, as an editable install would: no install step to wait for.
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
export ROOFLINT_GIT_COMMIT=${ROOFLINT_GIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
nvidia-smi -L | tee "$work/gpus.txt"
python3 -c "import dask, distributed, torch; print('dask', dask.__version__, 'distributed', distributed.__version__, 'torch', torch.__version__)" | tee -a "$work/gpus.txt"

# Runs a stage under a limit; SIGINT first, so bench keeps its rows and writes results.json.
stage() {
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s): rooflint $*" | tee -a "$work/commands.txt"
  local t0=$(date +%s.%N)
  timeout -s INT -k 30 "$limit" python3 -m rooflint "$@" >"$work/$name.log" 2>&1
  local code=$?
  local t1=$(date +%s.%N)
  echo "$name exit=$code wall_s=$(python3 -c "print(round($t1 - $t0, 1))")" | tee -a "$work/walls.txt"
  tail -3 "$work/$name.log"
}

stage fleet 300 bench all --size large --scheduler local --out "$work/fleet"
stage one "$(limit 170 300)" bench all --size large --scheduler local --devices 0 --out "$work/one"

# (c) a cluster as it runs on real machines: separate processes, one worker per GPU, labelled.
label=$(python3 -c "import torch; from rooflint.engine.fleet.resources import label_for; print(label_for(torch.cuda.get_device_name(0)))")
echo "GPU type label: $label" | tee -a "$work/commands.txt"
port=8786
# Every retry is rooflint's (fleet/client.py); Dask's default would re-run a lost task silently.
DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0 python3 -m distributed.cli.dask_scheduler \
  --host 127.0.0.1 --port $port --no-dashboard >"$work/scheduler.log" 2>&1 &
sched_pid=$!
worker_pids=()
for gpu in 0 1; do
  CUDA_VISIBLE_DEVICES=$gpu python3 -m distributed.cli.dask_worker tcp://127.0.0.1:$port \
    --name gpu$gpu --nthreads 1 --memory-limit 0 --no-dashboard \
    --resources "GPU=1,gpu-$label=1" >"$work/worker-gpu$gpu.log" 2>&1 &
  worker_pids+=($!)
done
echo "scheduler pid $sched_pid, workers ${worker_pids[*]}" | tee -a "$work/commands.txt"
cat >>"$work/commands.txt" <<EOF
DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0 dask scheduler --host 127.0.0.1 --port $port --no-dashboard
CUDA_VISIBLE_DEVICES=0 dask worker tcp://127.0.0.1:$port --name gpu0 --nthreads 1 --memory-limit 0 --resources "GPU=1,gpu-$label=1"
CUDA_VISIBLE_DEVICES=1 dask worker tcp://127.0.0.1:$port --name gpu1 --nthreads 1 --memory-limit 0 --resources "GPU=1,gpu-$label=1"
EOF
# Kill gpu1's worker (nanny, worker and measuring process: its process group) once a row from it
# is in the CSV: it is then mid-task, with variants of its group left to measure.
(
  csv="$work/cluster/results.csv"
  for _ in $(seq 1 600); do
    if [ -f "$csv" ] && python3 - "$csv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
sys.exit(0 if any(r["device_index"] == "1" for r in rows) else 1)
EOF
    then
      echo "$(date -u +%T) killing worker gpu1 (pid ${worker_pids[1]} and every process below it)" | tee -a "$work/kill.txt"
      kill_tree "${worker_pids[1]}"
      exit 0
    fi
    sleep 0.2
  done
) &
killer=$!
stage cluster "$(limit 20 150)" bench softmax layernorm layernorm_backward gelu rope kv_cache \
  --size large --scheduler tcp://127.0.0.1:$port --gpu-types "$label" --out "$work/cluster"
kill "$killer" 2>/dev/null
for pid in "${worker_pids[@]}" "$sched_pid"; do kill_tree "$pid"; done

if [ "$(left)" -gt 200 ]; then
  stage fleet-warm "$(limit 30 300)" bench all --size large --scheduler local --out "$work/fleet-warm"
fi

python3 - "$work" <<'EOF' | tee "$work/summary.txt"
import csv, statistics, sys
from collections import Counter
from pathlib import Path

work = Path(sys.argv[1])
walls = dict(line.split(" ", 1) for line in (work / "walls.txt").read_text().splitlines())
def load(name):
    path = work / name / "results.csv"
    if not path.exists():
        return None, []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        return reader.fieldnames, list(reader)
print(f"{'stage':<11} {'exit/wall':<24} {'rows':>5} {'ok':>5}  rows per (host, gpu, device_index)")
data = {}
for name in ("fleet", "one", "cluster", "fleet-warm"):
    header, rows = load(name)
    data[name] = (header, rows)
    if header is None:
        print(f"{name:<11} not run")
        continue
    per = Counter((r["host"], r["gpu"], r["device_index"]) for r in rows)
    ok = sum(r["status"] == "ok" for r in rows)
    print(f"{name:<11} {walls.get(name, '?'):<24} {len(rows):>5} {ok:>5}  {dict(per)}")
(h1, fleet), (h2, one) = data["fleet"], data["one"]
if h1 and h2:
    print(f"schema: fleet and one-GPU headers identical: {h1 == h2} ({len(h1)} columns)")
    key = lambda r: (r["family"], r["variant"], r["dtype"], r["shape"])
    a = {key(r): r for r in fleet if r["status"] == "ok"}
    b = {key(r): r for r in one if r["status"] == "ok"}
    only = sorted(set(map(key, fleet)) ^ set(map(key, one)))
    print(f"rows: fleet {len(fleet)}, one GPU {len(one)}; keys in only one of them: {len(only)} {only[:10]}")
    ratios = sorted((float(a[k]["median_ms"]) / float(b[k]["median_ms"]), k) for k in a.keys() & b.keys())
    if ratios:
        values = [r for r, _ in ratios]
        print(f"median_ms fleet / one GPU over {len(values)} ok rows: median {statistics.median(values):.3f}, "
              f"p10 {values[len(values) // 10]:.3f}, p90 {values[9 * len(values) // 10]:.3f}")
        print("furthest apart:", ", ".join(f"{'/'.join(k[:2])} {k[3]} {r:.2f}" for r, k in ratios[:3] + ratios[-3:]))
_, cluster = data["cluster"]
log = work / "cluster" / "fleet.log"
if log.exists():
    print("cluster fleet.log, retries and losses:")
    for line in log.read_text().splitlines():
        if "again" in line or "died" in line or "lost" in line:
            print("  " + line)
print((work / "kill.txt").read_text().strip() if (work / "kill.txt").exists() else "no worker was killed")
for name, (_, rows) in data.items():
    shared = sum("another process was using the GPU" in r["message"] for r in rows)
    if shared:
        print(f"{name}: {shared} rows saw another process on their GPU")
EOF

# At most 8 files come back: the CSVs, the summary and everything else packed.
cp "$work/summary.txt" "$OUT/summary.txt"
for name in fleet one cluster; do
  [ -f "$work/$name/results.csv" ] && cp "$work/$name/results.csv" "$OUT/$name-results.csv"
done
[ -f "$work/cluster/fleet.log" ] && cp "$work/cluster/fleet.log" "$OUT/cluster-fleet.log"
tar -czf "$OUT/fleet_x2.tar.gz" -C "$work" .
ls -la "$OUT"
echo "total wall $((SECONDS - start)) s"
