"""Each kernel set of a GPU run measured in a process of its own.

A decode loop that replays CUDA graphs runs slower in a process where another set has already
captured, replayed and destroyed its own graphs: each graph's kernels run exactly as fast, but the
GPU idles before each graph although the host is well ahead of it (docs/perf-notes). Whatever state
the driver keeps from the first set's graphs, a set's numbers must not depend on which set ran
before it, so each set gets a fresh process: it rebuilds the model from the same seed (the same weights), recomputes
Hugging Face's reference, checks and times itself, and sends its SetResult back. A worker that
dies takes only its own set with it; rows of the sets before it are on disk already.
"""

from __future__ import annotations

import multiprocessing
import os

from rooflint.core.specs import GpuSpec
from rooflint.engine.parent_watch import end_with_parent
from rooflint.models.catalog import get_model
from rooflint.models.kernel_set_run import inputs, load, references, resolve_device, run_set
from rooflint.models.outcome import ModelRequest, SetResult
from rooflint.outputs.results import ERROR


def run_set_isolated(name: str, request: ModelRequest, gpu_spec: GpuSpec) -> SetResult:
    """run_set in a spawned process (never forked: the parent holds a CUDA context).

    Ctrl-C (or `timeout -s INT` on the parent alone) stops the worker at once and propagates, so
    the model run closes its results with every earlier set's rows."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    worker = context.Process(target=_worker, args=(send, name, request, gpu_spec, os.getpid()), daemon=True)
    worker.start()
    send.close()  # the worker holds the only sending end: its death ends the pipe
    try:
        return receive.recv()
    except EOFError:
        worker.join(10)
        return SetResult(name, ERROR, f"its worker process died (exit code {worker.exitcode}) before it reported")
    except KeyboardInterrupt:
        worker.terminate()
        raise
    finally:
        receive.close()
        worker.join(10)


def _worker(send, name: str, request: ModelRequest, gpu_spec: GpuSpec, parent: int) -> None:
    # A daemon process is ended by its parent's normal exit only: one whose parent was killed would
    # go on timing its set on the GPU, orphaned, for minutes.
    end_with_parent(parent)
    try:
        result = _measure_alone(name, request, gpu_spec)
    except BaseException as error:  # anything run_set did not turn into a result: report it, one line
        # KeyboardInterrupt (the deadline's SIGINT) has no message: splitlines() is then empty
        first = next(iter(str(error).splitlines()), "")[:200]
        result = SetResult(name, ERROR, f"{type(error).__name__} in its worker: {first}".rstrip(": "))
    send.send(result)
    send.close()


def _measure_alone(name: str, request: ModelRequest, gpu_spec: GpuSpec) -> SetResult:
    device = resolve_device(request.device)
    loaded = load(request, request.model_spec or get_model(request.model), device)
    ids, prompt = inputs(request, loaded.dims.vocab, device)
    reference = references(loaded, request, ids, prompt)
    return run_set(name, loaded, request, device, gpu_spec, ids, prompt, reference)
