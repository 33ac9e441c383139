"""`rooflint model`: build a model, check each kernel set against Hugging Face, time and profile it.

For each kernel set: correctness first (prefill logits and greedy tokens against HF eager; a set
that fails is reported and never timed), then the three phases (prefill, decode, generate) are
timed, then one prefill forward and one decode step are profiled and their kernels attributed to
ops (models/kernel_set_run.py). Every number becomes a ResultRow (models/rows.py), and each phase
gets a table (models/tables.py) and a roofline chart with one point per op (models/charts.py).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rooflint.core.errors import UserError
from rooflint.core.family import DTYPES
from rooflint.core.paths import output_dir
from rooflint.core.specs import GpuSpec
from rooflint.engine import environment
from rooflint.engine.bench import keep_previous
from rooflint.models import checkpoint_files, memory, peers, sweep
from rooflint.models.base import check_checkpoint, require_transformers
from rooflint.models.baseline import run_baselines
from rooflint.models.catalog import get_model
from rooflint.models.flag_checks import validate
from rooflint.models.isolation import run_set_isolated
from rooflint.models.kernel_set_run import inputs, load, references, resolve_device, run_set
from rooflint.models.kernel_sets import ALL_SETS, KERNEL_SETS
from rooflint.models.outcome import ModelOutcome, ModelRequest
from rooflint.models.rows import baseline_rows, set_rows
from rooflint.models.tables import write_tables
from rooflint.outputs.folder_lock import FolderLock
from rooflint.outputs.results import OK, ResultRow, ResultWriter


def run_model(request: ModelRequest, log: Callable[[str], None] = lambda text: None) -> ModelOutcome:
    wanted = validate(request)
    spec_model = request.model_spec or get_model(request.model)
    require_transformers()
    if request.weights is not None:
        check_checkpoint(spec_model, Path(request.weights))  # its architecture and dtypes, before "building"
    device = resolve_device(request.device)
    default = list(KERNEL_SETS) if device.type == "cuda" else ["eager"]  # library sets only when asked for
    wanted = [k for k in ALL_SETS if k in wanted] if wanted else default
    isolate = request.isolate if request.isolate is not None else device.type == "cuda"
    weights_bytes = preflight(request, spec_model, device, copies=2 if isolate else 1)  # before building anything
    gpu_spec = request.spec or _gpu_spec(request, device)
    # A checkpoint keeps its own config: the preset resolve() defaults to (llama-3.2-1b) is not what loads
    what = f"{request.model} {request.config}" if request.weights is None else f"--weights {request.weights}"
    log(f"building {what} ({request.dtype}, {device.type})")
    loaded = load(request, spec_model, device)
    if getattr(loaded.hf.config, "quantization_config", None):
        # A quantized checkpoint's config.json: its shapes are built with random weights in --dtype,
        # so the rows are the unquantized model's, whatever the file's name says.
        log(f"note: {loaded.config_name}'s quantization_config is not applied: its weights are random {request.dtype}; "
            "--weights-dtype int8 or fp8 times a quantized decode")  # fmt: skip
    dims = loaded.dims
    check_positions(dims, request, loaded.config_name)  # a --weights checkpoint's own config, read as it loaded
    family = f"model:{loaded.config_name}"
    ids, prompt = inputs(request, dims.vocab, device)
    points = refused = None
    if request.sweep_batches or request.sweep_contexts:
        points, refused = sweep.plan(dims, weights_bytes, request.sweep_batches or [request.batch],
                                     request.sweep_contexts or [request.prompt], request.dtype,
                                     memory.free_bytes(device) + weights_bytes, device, loaded.config_name)  # fmt: skip

    reference = None
    if not isolate:  # an isolated set computes its own, in its process
        log("HF eager reference: logits" + (" in fp32" if request.dtype != "fp32" else "") + " and greedy tokens")
        reference = references(loaded, request, ids, prompt)

    output_dir(request.out)
    # One run writes a folder at a time, as bench's lock keeps it: a model run's results.csv opened
    # over a bench's (or another model run's) cut that run's rows off and interleaved the two.
    with FolderLock(request.out):
        keep_previous(request.out)  # as bench keeps them: the last run's results.csv was written over
        writer = ResultWriter(request.out)
        outcome = ModelOutcome(loaded.config_name, family, gpu_spec, request, [], {}, [])

        def emit(row: ResultRow) -> None:
            writer.append(environment.stamp(row, gpu_spec, device.type))

        def baselines(compiled: bool) -> None:
            measured = run_baselines(loaded, request, device, gpu_spec, ids, prompt, log, compiled=compiled)
            outcome.baselines.update(measured)
            for row in baseline_rows(measured, family, request, gpu_spec):
                emit(row)

        try:
            for name in wanted:
                if name == "compile" and request.hf_baseline and not outcome.baselines:
                    baselines(compiled=False)  # the quick baselines before the minutes of compiling
                log(f"kernel set {name}" + (" (own process)" if isolate else ""))
                if isolate:
                    result = run_set_isolated(name, request, gpu_spec)
                else:
                    result = run_set(name, loaded, request, device, gpu_spec, ids, prompt, reference)
                outcome.sets.append(result)
                for row in set_rows(result, family, request, gpu_spec, outcome.sets):
                    emit(row)
                gc.collect()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            del reference
            if request.hf_baseline:
                if not outcome.baselines:
                    baselines(compiled=False)
                baselines(compiled=True)
                static = peers.hf_static_compiled(loaded, request, device, gpu_spec, prompt, log)
                outcome.baselines.update(static)
                skipped = peers.skipped_peer_rows(family, request, device)
                for row in baseline_rows(static, family, request, gpu_spec) + skipped:
                    emit(row)
            if points:
                passed = [result.name for result in outcome.sets if result.status == OK]

                def point_done(point: sweep.SweepPoint) -> None:
                    outcome.sweep.append(point)
                    for row in sweep.sweep_rows([point], family, request, gpu_spec):
                        emit(row)

                sweep.run_sweep(loaded, request, passed, device, gpu_spec, points, refused, log, point_done)
        finally:
            writer.close()
            outcome.rows = writer.rows
        outcome.files = [writer.csv_path, writer.out_dir / "results.json"]
        outcome.files.append(write_tables(outcome))
        if request.plots:
            from rooflint.models.charts import plot_phases  # matplotlib: loaded only when charts are drawn

            outcome.files += plot_phases(outcome)
            if outcome.sweep:
                from rooflint.models.charts import plot_sweep

                outcome.files += plot_sweep(outcome)
        return outcome


def preflight(request: ModelRequest, spec_model, device: torch.device, copies: int) -> int:
    """The config and the memory the run needs, checked before any weight is built or loaded; the
    bytes the built model holds, its weights and RoPE tables. A --weights checkpoint is judged on
    its own config.json, the one its load reads."""
    if request.weights is not None:
        # Its tables are sized by its own max_position_embeddings: unjudged, a checkpoint of 10**12
        # positions was loaded (minutes for a large one) and then failed allocating terabytes.
        name = str(Path(request.weights) / "config.json")
        hf_config = checkpoint_config(Path(request.weights))
        lower = "--batch or --seq"  # --layers cannot shorten a checkpoint (check_weights_flags)
    else:
        if request.config not in spec_model.configs:
            raise UserError(
                f"unknown {spec_model.name} config {request.config!r}; valid: {', '.join(spec_model.configs)}"
            )
        name, lower = request.config, "--batch or --seq (or --layers)"
        hf_config = spec_model.hf_config(request.config, request.layers)
    dims = spec_model.dims(hf_config)
    # The positions (and below, the sweep's points), judged on the config: checked once the model
    # was built, a --seq or --context past them was refused only after minutes of building (an 8B
    # model on a CPU), under a "building" line that said it had started.
    check_positions(dims, request, name)
    size = DTYPES[request.dtype].itemsize
    weights = _parameter_bytes(spec_model, hf_config, size, name if request.weights is not None else None)
    # the triton set's folded weight copies (ROOFLINT_NORM_IN_GEMM), held in its run beside one model
    triton = request.kernels is None or "triton" in request.kernels
    folded = spec_model.folded_weight_bytes(hf_config, size) if triton else 0
    # The RoPE tables are sized by max_position_embeddings, not by the run: uncounted, a config of
    # 10**12 positions passed this check and failed allocating terabytes after "building".
    held, scratch = spec_model.rope_table_bytes(hf_config, size, fp32_cache="flashinfer" in (request.kernels or ()))
    tables = copies * held + scratch  # each copy keeps its own; one builds at a time
    free = memory.free_bytes(device)
    # A learned position table is among the weights: a config of 10**12 positions was refused by
    # check_fits below, whose "lower --batch or --seq" named no remedy.
    learned = copies * spec_model.position_parameter_bytes(hf_config, size)
    memory.check_position_table(name, spec_model.positions_field, dims.max_positions, learned,
                                copies * weights - learned, free, device)  # fmt: skip
    memory.check_rope_tables(name, dims.max_positions, tables, copies * weights, free, device)
    # a reduced-precision run's reference logits are held in fp32 (the fp32 model copy itself is
    # sized to what is free when it is built: kernel_set_run.fp32_reference)
    fp32_reference_extra = request.batch * request.seq * dims.vocab * max(0, 4 - size)
    need = memory.MemoryNeed(
        copies * weights + folded,
        memory.kv_cache_bytes(dims, request.batch, request.prompt + request.new_tokens, size),
        memory.prefill_activation_bytes(dims, request.batch, max(request.seq, request.prompt + request.new_tokens),
                                        size) + fp32_reference_extra,
        tables,
    )  # fmt: skip
    memory.check_fits(f"{name} at B={request.batch}, T={request.seq}", need, free, device, lower)
    if request.dtype != "fp32":
        # The fp32 reference copy is cut to the layers that fit, but every copy computes the whole
        # tables, in fp32, beside the run's own: where even they cannot fit, no copy can be built.
        # Built after the run's tables, their scratch is gone by then.
        fp32_held, fp32_scratch = spec_model.rope_table_bytes(hf_config, 4)
        memory.check_rope_tables(name, dims.max_positions, copies * held + fp32_held + fp32_scratch,
                                 copies * weights, free, device, "the fp32 reference copy's included")  # fmt: skip
    if request.sweep_batches or request.sweep_contexts:
        sweep.plan(dims, weights + held, request.sweep_batches or [request.batch],
                   request.sweep_contexts or [request.prompt], request.dtype, free, device, name)  # fmt: skip
    return weights + held


def checkpoint_config(weights_dir: Path) -> Any:
    """A --weights checkpoint's config.json as its load reads it (the config class of its
    model_type), or one line saying why it cannot be read."""
    path = weights_dir / "config.json"
    checkpoint_files.read_config(weights_dir)
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its warnings about the fields: the load prints none either
    try:
        return AutoConfig.from_pretrained(str(weights_dir), local_files_only=True)
    except Exception as error:  # noqa: BLE001 - only the file's fields are at stake here
        # transformers validates each field as it builds the config (a string or null
        # max_position_embeddings, an unknown model_type): bad input, one line
        raise UserError(
            f"--weights {path} is not a config transformers accepts: {' '.join(str(error).split())}"
        ) from None
    finally:
        hf_logging.set_verbosity(verbosity)


def _parameter_bytes(spec_model, hf_config, size: int, checkpoint: str | None) -> int:
    """memory.parameter_bytes; for a checkpoint's config (not one rooflint checked field by field), a
    model its fields cannot build (heads that do not divide its width) refused in one line."""
    try:
        return memory.parameter_bytes(spec_model, hf_config, size)
    except Exception as error:  # noqa: BLE001 - the config's fields, which the load would build from
        if checkpoint is None:
            raise
        raise UserError(f"--weights {checkpoint}: no {spec_model.name} model builds from it: "
                        f"{' '.join(str(error).split())}") from None  # fmt: skip


def check_positions(dims, request: ModelRequest, name: str) -> None:
    """--seq, and --prompt + --new-tokens, each within the model's positions."""
    generated = request.prompt + request.new_tokens
    if request.seq > dims.max_positions or generated > dims.max_positions:
        raise UserError(
            f"{name} has {dims.max_positions} positions: --seq ({request.seq}) and --prompt + --new-tokens "
            f"({generated}) must each fit"
        )


def _gpu_spec(request: ModelRequest, device: torch.device) -> GpuSpec:
    if device.type == "cuda":
        from rooflint.core.specs import current_gpu_spec

        return current_gpu_spec(request.spec_file, request.gpu)
    from rooflint.engine.ceilings import cpu_ceilings

    return cpu_ceilings()
