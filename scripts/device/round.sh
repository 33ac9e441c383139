#!/usr/bin/env bash
# Several device scripts back to back on one lent GPU, so the GPU never idles between device calls
# and no step times while another runs. The steps go on in their own process session; each call of
# this script waits (up to WAIT_S) and ships every step finished since the last call as
# $OUT/<step>.tar.gz. Call it again with the same NAME to keep waiting; the steps are not restarted.
#   bash scripts/device/round.sh h100 'reference=bash scripts/device/reference.sh h100' \
#        'gpu-tests=bash scripts/device/gpu_tests.sh'
# Each step runs from the checkout root with OUT=/tmp/rooflint-round-NAME/<step>; its output is
# in <step>.log. A step that fails does not stop the ones after it; STEP_S (seconds) stops a step that
# runs longer (exit 124 in progress.txt).
set -u
name=${1:?usage: round.sh NAME 'step=command'...}
shift
state=/tmp/rooflint-round-$name
if [ ! -f "$state/started" ]; then
  mkdir -p "$state"
  date -u +%FT%TZ >"$state/started"
  printf '%s\n' "$@" >"$state/steps.txt"
  setsid bash -c '
    state=$1; shift; cd "$1"; shift
    for step in "$@"; do
      label=${step%%=*}; command=${step#*=}
      mkdir -p "$state/$label"
      echo "$(date -u +%T) start $label: $command" >>"$state/progress.txt"
      t0=$SECONDS
      # STEP_S bounds each step, so a hung kernel costs one step, not the round (and its device time).
      OUT="$state/$label" WAIT_S=100000 timeout "${STEP_S:-100000}" bash -c "$command" >"$state/$label/$label.log" 2>&1
      echo "$(date -u +%T) done $label: exit $? after $((SECONDS - t0)) s" >>"$state/progress.txt"
      touch "$state/$label/.done"
    done
    touch "$state/all-done"
  ' _ "$state" "$PWD" "$@" >>"$state/round.log" 2>&1 </dev/null &
fi
deadline=$((SECONDS + ${WAIT_S:-560}))
while [ ! -f "$state/all-done" ] && [ $SECONDS -lt $deadline ]; do sleep 5; done
for dir in "$state"/*/; do
  label=$(basename "$dir")
  if [ -f "$dir/.done" ] && [ ! -f "$dir/.shipped" ]; then
    tar -C "$dir" -czf "$OUT/$label.tar.gz" . && touch "$dir/.shipped"
  fi
done
cat "$state/progress.txt"
[ -f "$state/all-done" ] && echo "ALL DONE $name" || echo "RUNNING $name: call again with the same NAME"
