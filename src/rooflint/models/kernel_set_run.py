"""One kernel set of a model run: built, checked against Hugging Face, timed and profiled.

In the calling process (CPU runs, tests) or in a process of its own (models/isolation.py); either
way from the same seed, so every process builds the same weights and inputs.
"""

from __future__ import annotations

import gc
import traceback
from pathlib import Path

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import DTYPES
from rooflint.engine.device import resolve_device as resolve_device_name
from rooflint.models import checks, measure, memory, quantized_weights
from rooflint.models import rows as R
from rooflint.models.attribution import Attribution, profile_step, split_phases
from rooflint.models.base import LoadedModel, ModelSpec, build, config_with_layers, copy_model
from rooflint.models.outcome import ModelRequest, PhaseResult, SetResult
from rooflint.models.runner import Runner
from rooflint.outputs.results import ERROR, FAILED, OK, SKIPPED


def resolve_device(device: str | None) -> torch.device:
    """``--device`` checked against this machine (engine/device.py), as a torch.device."""
    return torch.device(resolve_device_name(device))


def load(request: ModelRequest, spec_model: ModelSpec, device: torch.device) -> LoadedModel:
    """The request's model, built from its seed (or its --weights): the same in every process."""
    return build(spec_model, request.config, DTYPES[request.dtype], device, weights_dir=request.weights,
                 layers=request.layers, seed=request.seed)  # fmt: skip


def references(loaded: LoadedModel, request: ModelRequest, ids, prompt) -> checks.Reference:
    """What every kernel set is checked against: Hugging Face eager's logits over ``ids`` (in fp32
    for a reduced-precision run, with HF's own error in the run's dtype) and its first greedy
    tokens after ``prompt`` in the run's dtype."""
    tokens = checks.hf_greedy(loaded.hf, prompt, min(checks.CHECK_TOKENS, request.new_tokens))
    if request.dtype == "fp32":
        return checks.Reference(checks.hf_logits(loaded.hf, ids), tokens)
    return fp32_reference(loaded, ids, tokens, memory.free_bytes(loaded.device))


def fp32_reference(loaded: LoadedModel, ids, tokens, free: int) -> checks.Reference:
    """HF's logits on an fp32 copy of the same weights (the whole model, or where it cannot fit in
    ``free`` bytes its first layers with the final norm and head) and HF's own error in the run's
    dtype on the same layers. The copies are gone before anything is timed."""
    total = loaded.dims.layers
    layers = fp32_layers(loaded, ids.shape[0], ids.shape[1], free)
    if layers == 0:
        note = "no fp32 reference: one fp32 layer does not fit; checked against HF in the same dtype"
        return checks.Reference(checks.hf_logits(loaded.hf, ids), tokens, note=note)
    cut = None if layers == total else layers
    exact_model = copy_model(loaded, torch.float32, cut)
    exact = checks.hf_logits(exact_model.hf, ids)
    del exact_model
    _release(loaded.device)
    same_layers = loaded if cut is None else copy_model(loaded, loaded.dtype, cut)
    hf_error = checks.relative_error(checks.hf_logits(same_layers.hf, ids), exact)
    del same_layers
    _release(loaded.device)
    return checks.Reference(exact, tokens, hf_error, cut, total)


def fp32_layers(loaded: LoadedModel, batch: int, seq: int, free: int) -> int:
    """How many layers an fp32 copy of the model can hold in ``free`` bytes, with its forward's
    activations over [batch, seq] and its RoPE tables: all of them, the first L, or 0."""
    config = loaded.hf.config
    one, two = (memory.parameter_bytes(loaded.spec, config_with_layers(config, n), 4) for n in (1, 2))
    per_layer, rest = two - one, 2 * one - two  # rest: embeddings, final norm, head
    activations = memory.prefill_activation_bytes(loaded.dims, batch, seq, 4)
    # The copy computes its own RoPE tables in fp32 (extract_weights), max_position_embeddings rows
    # however few layers it keeps: uncounted, a copy judged to fit failed allocating them.
    held, scratch = loaded.spec.rope_table_bytes(config, 4)
    budget = memory.HEADROOM * free - activations - rest - held - scratch
    return max(0, min(loaded.dims.layers, int(budget // per_layer))) if budget > 0 else 0


def _release(device: torch.device) -> None:
    """A dropped model copy's memory handed back to the GPU before the next copy or the timing."""
    if device.type == "cuda":  # on a CPU the last reference frees it; a collection costs ~0.5 s there
        gc.collect()
        torch.cuda.empty_cache()


def check_logits(loaded: LoadedModel, kernels, request, runner: Runner, ids, reference: checks.Reference):
    """The set's prefill logits over the layers the reference covers: the timed runner's, or a
    runner's on a copy of the first ``reference.layers`` layers (the same kernels)."""
    if reference.layers is None:
        return runner.prefill(ids)
    cut = copy_model(loaded, loaded.dtype, reference.layers)
    twin = Runner(cut, kernels, request.batch, request.prompt, request.new_tokens)
    try:
        return twin.prefill(ids)
    finally:
        twin.release()
        del twin, cut
        _release(loaded.device)


def inputs(request: ModelRequest, vocab: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(prefill ids [B, seq], prompt [B, prompt]): the same for every set and every process, by seed."""
    generator = torch.Generator(device="cpu").manual_seed(request.seed)
    ids = torch.randint(0, vocab, (request.batch, request.seq), generator=generator).to(device)
    prompt = torch.randint(0, vocab, (request.batch, request.prompt), generator=generator).to(device)
    return ids, prompt


def run_set(
    name, loaded: LoadedModel, request, device, gpu_spec, ids, prompt, reference: checks.Reference
) -> SetResult:
    spec_model, dims = loaded.spec, loaded.dims
    try:
        eps = spec_model.norm_eps(loaded.hf.config)
        kernels = spec_model.kernel_set(name, loaded.dtype, device, dims.head_dim, eps)
    except VariantSkipped as why:
        return SetResult(name, SKIPPED, str(why))
    kernels.prepare(loaded.weights)
    quantized_weights.attach(kernels, loaded.weights, request.weights_dtype)
    runner = Runner(loaded, kernels, request.batch, request.prompt, request.new_tokens)
    result = SetResult(name, OK, "", plan=kernels.describe())
    try:
        # Correctness before any timing, on the path that is timed (graphs included).
        logits = check_logits(loaded, kernels, request, runner, ids, reference)
        runner.capture()
        result.note = runner.graph_note
        tokens = runner.generate(prompt)
        result.check = checks.compare(logits, tokens, reference, request.dtype)
        del logits
        if not result.check.passed:
            result.status, result.message = FAILED, result.check.describe()
            return result
        quantized = quantized_weights.check_decode(runner, prompt, _fp32_fits(loaded, request, kernels))
        if quantized is not None:
            _release(device)  # the check's fp32 copy, gone before anything is timed
            result.note = "; ".join(filter(None, (result.note, quantized.describe())))
            if not quantized.passed:
                result.status, result.message = FAILED, quantized.describe()
                return result
        result.phases = measure_phases(runner, request, device, gpu_spec, ids, prompt)
    except torch.cuda.OutOfMemoryError as error:
        result.status, result.message = ERROR, f"out of memory: {str(error).splitlines()[0]}"
    except Exception as error:  # one set's failure is reported; the others still run
        last = traceback.extract_tb(error.__traceback__)[-1]
        where = f"{Path(last.filename).name}:{last.lineno}"
        result.status, result.message = ERROR, f"{type(error).__name__} at {where}: {str(error).splitlines()[0][:200]}"
    finally:
        runner.release()
    return result


def _fp32_fits(loaded: LoadedModel, request, kernels) -> bool:
    """Whether an fp32 copy of the whole model fits beside this set (the quantized check's reference)."""
    if not getattr(kernels, "quantized", None):
        return False  # no quantized weights: check_decode has nothing to check
    free = memory.free_bytes(loaded.device)
    return fp32_layers(loaded, request.batch, request.prompt, free) == loaded.dims.layers


def measure_phases(runner: Runner, request, device, gpu_spec, ids, prompt) -> dict[str, PhaseResult]:
    loaded, dims, dtype = runner.loaded, runner.dims, request.dtype
    spec_model = loaded.spec
    batch, new = request.batch, request.new_tokens
    profiled = not runner.kernels.compiled  # inductor fuses across op boundaries: no per-op ranges
    phases: dict[str, PhaseResult] = {}

    prefill = R.phase_of("prefill", request)
    timed = measure.time_prefill(lambda: runner.prefill(ids), device, gpu_spec.l2_bytes, request.rep_ms)
    costs = spec_model.op_costs(dims, prefill, dtype, runner.kernels.fusions(prefill.rows, False))
    phases["prefill"] = PhaseResult(prefill, timed, batch * request.seq, costs)
    if profiled:
        phases["prefill"].attribution = _profiled(runner, lambda: runner.prefill(ids), device)

    whole, per_step = measure.time_generation(lambda: runner.start(prompt), runner.decode, new - 1, device,
                                              request.rep_ms)  # fmt: skip
    if per_step is not None:
        middle = new // 2  # the profiled step sees the loop's mean cache length, prompt + N/2
        decode = R.phase_of("decode", request)
        costs = spec_model.op_costs(dims, decode, dtype, runner.kernels.fusions(decode.rows, True))
        costs = quantized_weights.decode_costs(costs, dims, decode, dtype, runner.kernels)  # 1-byte weights
        phases["decode"] = PhaseResult(decode, per_step, batch, costs)
        if profiled:
            runner.start(prompt)
            replay = runner.graphs[middle - 1].replay if runner.graphs else None  # the timed step's graph
            phases["decode"].attribution = _profiled(runner, lambda: runner.step(middle), device, replay)
    phases["generate"] = PhaseResult(R.phase_of("generate", request), whole, batch * new, {})
    for result in phases.values():
        if result.costs:
            result.floor_s, result.bound = R.phase_floor(R.total_cost(result.costs), gpu_spec, dtype)
    return phases


def _profiled(runner: Runner, fn, device, replay=None) -> Attribution:
    runner.rec.enabled = True
    try:
        with torch.no_grad():
            return split_phases(profile_step(fn, device, replay), runner.kernels.phase_shares())
    finally:
        runner.rec.enabled = False
