"""The burst start state's census (issue 14, round 21's next question): how long the GPU idles before
each timed row, and what the preheat threshold does with it. Not part of rooflint: Python imports
this module at the start of every process that has this folder on PYTHONPATH, the bench's workers
included, and it acts only where ROOFLINT_GAP_LOG names a file:

    PYTHONPATH=scripts/device/gap_census:$PYTHONPATH ROOFLINT_GAP_LOG=$OUT/gaps.jsonl \\
      ROOFLINT_GAP_THRESHOLD_S=0.5 rooflint bench all --size large --out $OUT/out

It sets rooflint.engine.timing.IDLE_BEFORE_PREHEAT_S to ROOFLINT_GAP_THRESHOLD_S (when given) and
appends one JSON line per start state: the row (time_cuda's NVTX name), the idle gap since the last
timed row ended (null for a process's first), the threshold, whether the row was heated, and the
seconds the start state took (heat and cool-down). A failure here is printed and leaves rooflint as
it is: the census must never change what it counts.
"""

import os

if os.environ.get("ROOFLINT_GAP_LOG"):
    try:
        import json
        import time

        from rooflint.engine import timing

        if os.environ.get("ROOFLINT_GAP_THRESHOLD_S"):
            timing.IDLE_BEFORE_PREHEAT_S = float(os.environ["ROOFLINT_GAP_THRESHOLD_S"])
        _label = {"row": ""}
        _time_cuda, _start_state = timing.time_cuda, timing.start_state

        def time_cuda(fn, *args, nvtx_name: str = "", **kwargs):
            _label["row"] = nvtx_name
            return _time_cuda(fn, *args, nvtx_name=nvtx_name, **kwargs)

        def start_state(sampler, *args, **kwargs):
            last = timing._BurstState.last_row_end
            began = time.perf_counter()
            gap = None if last is None else began - last
            _start_state(sampler, *args, **kwargs)
            threshold = timing.IDLE_BEFORE_PREHEAT_S
            record = {
                "wall": time.time(),
                "pid": os.getpid(),
                "row": _label["row"],
                "gap_s": gap,
                "threshold_s": threshold,
                "heated": bool(sampler.available and (gap is None or gap > threshold)),
                "start_state_s": time.perf_counter() - began,
            }
            with open(os.environ["ROOFLINT_GAP_LOG"], "a") as log:
                log.write(json.dumps(record) + "\n")

        timing.time_cuda, timing.start_state = time_cuda, start_state
    except Exception as error:  # noqa: BLE001 - a census that breaks the bench would count nothing
        print(f"gap census off: {error!r}")
