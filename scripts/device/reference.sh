#!/usr/bin/env bash
# A reference run on a lent GPU, started as a newcomer would: install the checkout (non-editable,
# from the checkout root; offline, since the GPU machine reaches no registry), `rooflint doctor`,
# then one `rooflint bench all --size large`. The run goes on in its own process session, so a
# bench longer than one device call survives the call: call this script again (same NAME) and it
# waits for the same run, then packs doctor output, the exact command and every output under
# $OUT/NAME.tar.gz (plus results.csv beside it).
#   bash scripts/device/reference.sh h100            # start (or keep waiting for) the run
#   EXTRA="--regime sustained" bash scripts/device/reference.sh h100-sustained attention gelu_linear
#   CUDA_VISIBLE_DEVICES=1 REUSE_INSTALL=1 bash scripts/device/reference.sh ...   # a second GPU, once installed
set -u
name=${1:?usage: reference.sh NAME [FAMILY...]}
shift
families=${*:-all}
state=/tmp/rooflint-ref-$name
if [ ! -f "$state/started" ]; then
  mkdir -p "$state"
  date -u +%FT%TZ >"$state/started"
  setsid bash -c '
    state=$1; families=$2; cd "$3"
    if ls .whl/*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    fi
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1  # keeps the peers of scripts/device/peers.sh
    # The device gets a copy of the tree without .git: the caller passes ROOFLINT_GIT_COMMIT.
    # (its .git, where it has one, can be stale, so the variable comes first).
    echo "${ROOFLINT_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" >"$state/commit.txt"
    # The README install, offline: no build isolation (no registry), no dependency resolution (the
    # image already holds torch, triton, typer, rich, pandas, matplotlib and nvidia-ml-py).
    # REUSE_INSTALL=1: a second run on another GPU of the same machine uses the install of the first
    # (two pip installs of one package at once would replace modules under a running bench).
    if [ -z "${REUSE_INSTALL:-}" ]; then
      python3 -m pip install -q --no-deps --no-build-isolation . >"$state/install.log" 2>&1 || echo "install failed" >>"$state/log"
    fi
    # `python3 -m pip`: the image has no `pip` command on PATH (versions.txt came back empty).
    python3 -m pip list --format=freeze 2>/dev/null \
      | grep -i -E "^(torch|triton|typer|rich|pandas|matplotlib|nvidia-ml-py|rooflint)==" >"$state/versions.txt"
    rooflint doctor --json "$state/doctor.json" >"$state/doctor.txt" 2>&1
    echo "doctor exit $?" >>"$state/doctor.txt"
    nvidia-smi >"$state/nvidia-smi.txt" 2>&1
    command="rooflint bench $families --size large --out $state/out ${EXTRA:-}"
    echo "$command" >"$state/command.txt"
    $command >"$state/bench.log" 2>&1
    echo "bench exit $?" >>"$state/bench.log"
    rooflint doctor >"$state/doctor-after.txt" 2>&1
    touch "$state/done"
  ' _ "$state" "$families" "$PWD" >>"$state/log" 2>&1 < /dev/null &
fi
deadline=$((SECONDS + ${WAIT_S:-540}))
while [ ! -f "$state/done" ] && [ $SECONDS -lt $deadline ]; do sleep 5; done
rows=$(($(wc -l <"$state/out/results.csv" 2>/dev/null || echo 1) - 1))
if [ -f "$state/done" ]; then
  tar -C "$state" -czf "$OUT/$name.tar.gz" .
  cp "$state/out/results.csv" "$OUT/$name-results.csv"
  echo "DONE $name: $rows rows; $(tail -1 "$state/bench.log")"
else
  echo "RUNNING $name: $rows rows so far; call again with the same NAME to keep waiting"
fi
tail -3 "$state/doctor.txt" 2>/dev/null
