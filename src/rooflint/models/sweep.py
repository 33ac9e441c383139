"""The decode sweep: `--batch 1,8,32,128 --context 512,4096,32768`, one decode step per point.

At each (batch, context) point every kernel set that passed its check runs SWEEP_STEPS greedy
decode steps (one CUDA graph each on a GPU) over a KV cache already holding ``context`` tokens.
The cache is filled with random rows instead of a prefill: a step's time depends on the cache's
length, not its values, and a 32768-token prefill at B=128 would cost more than the sweep. Each
point gets a row with tok/s, the floor and which floor binds: at small batch a step reads every
weight for a few tokens (memory-bound); as B grows the GEMMs' FLOPs per weight byte grow with it
until the tensor-core term binds, later the longer the context (the KV cache is read per token).

Memory is checked per point before anything is allocated: a point that cannot fit becomes a
skipped row with the reason while others fit; when none fits the run is refused in one line.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rooflint.core.errors import UserError
from rooflint.core.family import element_size
from rooflint.models import measure, memory
from rooflint.models import rows as R
from rooflint.models.base import Dims, Phase
from rooflint.models.flag_checks import parse_sizes as parse_sizes  # named here too
from rooflint.models.runner import Runner
from rooflint.outputs.results import ERROR, OK, SKIPPED, ResultRow

SWEEP_STEPS = 8  # decode steps timed per point, each at its own cache length (a graph each on a GPU)


@dataclass
class SweepPoint:
    kernels: str
    batch: int
    context: int
    status: str
    message: str = ""
    tokens_per_s: float = float("nan")
    ms_per_step: float = float("nan")
    floor_ms: float = float("nan")
    pct_of_floor: float = float("nan")
    bound: str = ""


def point_need(dims: Dims, weights_bytes: int, batch: int, context: int, dtype: str) -> memory.MemoryNeed:
    size = element_size(dtype)
    return memory.MemoryNeed(
        weights_bytes,
        memory.kv_cache_bytes(dims, batch, context + SWEEP_STEPS, size),
        memory.decode_activation_bytes(dims, batch, size),
    )


def plan(dims: Dims, weights_bytes: int, batches, contexts, dtype: str, free: int, device, name: str):
    """(points that fit, {point: why not}); refuses in one line when no point fits."""
    runnable, refused = [], {}
    for batch in batches:
        for context in contexts:
            if context + SWEEP_STEPS > dims.max_positions:
                refused[(batch, context)] = (
                    f"context {context} + {SWEEP_STEPS} steps is past {name}'s {dims.max_positions} positions"
                )
                continue
            need = point_need(dims, weights_bytes, batch, context, dtype)
            why = memory.refusal(f"B={batch}, context {context}", need, free, device, "--batch or --context")
            if why:
                refused[(batch, context)] = why
            else:
                runnable.append((batch, context))
    if not runnable:
        first = next(iter(refused.values()))
        raise UserError(f"no sweep point fits: {first}" if len(refused) > 1 else first)
    return runnable, refused


def run_sweep(loaded, request, set_names, device, gpu_spec, points, refused, log: Callable[[str], None],
              done: Callable[[SweepPoint], None] = lambda point: None):  # fmt: skip
    """Every point for every set in ``set_names``: a SweepPoint each, refused points included.
    ``done`` gets each point as it is measured, so its row is on disk before the next point starts
    (a Ctrl-C in a long sweep keeps every point measured so far)."""
    results = []
    for name in set_names:
        for (batch, context), why in refused.items():
            results.append(SweepPoint(name, batch, context, SKIPPED, why))
            done(results[-1])
        for batch, context in points:
            log(f"sweep {name}: B={batch}, context {context}")
            results.append(_measure_point(loaded, request, name, device, gpu_spec, batch, context))
            done(results[-1])
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return results


def _measure_point(loaded, request, name, device, gpu_spec, batch, context) -> SweepPoint:
    spec, dims = loaded.spec, loaded.dims
    point = SweepPoint(name, batch, context, OK)
    runner = None
    try:
        kernels = spec.kernel_set(name, loaded.dtype, device, dims.head_dim, spec.norm_eps(loaded.hf.config))
        kernels.prepare(loaded.weights)
        runner = Runner(loaded, kernels, batch, context, SWEEP_STEPS + 1)
        cache = runner._allocate_cache()
        torch.manual_seed(request.seed)
        for pool in (cache.k_layers, cache.v_layers):  # filled on the device: at B=128 a pool is GBs
            pool.normal_()
        runner.token.random_(0, dims.vocab)
        runner.capture()
        runner.decode()  # warm: compiles (compile set) and fills caches outside the timer
        _, per_step = measure.time_generation(lambda: None, runner.decode, SWEEP_STEPS, device, request.rep_ms)
        phase = Phase("decode", batch, 1, context + SWEEP_STEPS // 2)
        costs = spec.op_costs(dims, phase, request.dtype, kernels.fusions(batch, True))
        floor_s, point.bound = R.phase_floor(R.total_cost(costs), gpu_spec, request.dtype)
        point.ms_per_step = per_step.median_ms
        point.tokens_per_s = batch / (per_step.median_ms / 1e3)
        point.floor_ms = floor_s * 1e3
        point.pct_of_floor = 100 * point.floor_ms / per_step.median_ms
        point.message = runner.graph_note
    except torch.cuda.OutOfMemoryError as error:
        point.status, point.message = ERROR, f"out of memory: {str(error).splitlines()[0]}"
    except Exception as error:  # one point's failure is a row; the other points still run
        point.status, point.message = ERROR, f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    finally:
        if runner is not None:
            runner.release()
    return point


def sweep_rows(points: list[SweepPoint], family: str, request, gpu_spec) -> list[ResultRow]:
    rows = []
    for point in points:
        shape = f"op=step,phase=decode,B={point.batch},context={point.context},sweep=1"
        row = R.base_row(family, point.kernels, point.kernels, request.dtype, shape, point.status)
        row.phase, row.batch, row.context = "decode", point.batch, point.context
        row.message = point.message
        if point.status == OK:
            row.median_ms, row.n_samples = point.ms_per_step, 1
            row.tokens_per_s, row.floor_ms, row.pct_of_floor = point.tokens_per_s, point.floor_ms, point.pct_of_floor
            row.pct_of_roof, row.bound = point.pct_of_floor, point.bound
        rows.append(row)
    return rows
