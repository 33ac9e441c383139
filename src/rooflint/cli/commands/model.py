"""`rooflint model gpt2`: a whole model's roofline op by op, with rooflint's kernels swapped in."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rooflint.cli.console import console, err_console, print_written, user_errors
from rooflint.cli.options import DeviceOption, GpuOption, SpecFileOption, path_option, split_named


@user_errors
def model_command(
    model: Annotated[
        str,
        typer.Argument(
            help="gpt2, gpt2-medium, llama-3.2-1b, llama-3.1-8b, qwen2.5-0.5b, qwen2.5-7b, mistral-7b, "
            "or a Hugging Face config.json path (model_type llama, qwen2 or mistral)."
        ),
    ],
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            help="A preset of the model (gpt2: gpt2, gpt2-medium, gpt2-large, gpt2-xl); not with --weights, "
            "whose checkpoint keeps its own config.",
        ),
    ] = None,
    batch: Annotated[
        str, typer.Option("--batch", help="Sequences per step; several (1,8,32,128) sweep decode over each.")
    ] = "8",
    context: Annotated[
        str | None,
        typer.Option("--context", help="Decode sweep: KV-cache lengths, e.g. 512,4096,32768 (one decode row each)."),
    ] = None,
    seq: Annotated[int, typer.Option("--seq", help="Tokens per sequence of the prefill forward.")] = 1024,
    prompt: Annotated[int, typer.Option("--prompt", help="Prompt tokens before greedy generation.")] = 512,
    new_tokens: Annotated[int, typer.Option("--new-tokens", help="Tokens generated greedily.")] = 128,
    dtype: Annotated[str, typer.Option("--dtype", help="fp32, fp16 or bf16.")] = "bf16",
    weights_dtype: Annotated[
        str | None,
        typer.Option(
            "--weights-dtype",
            help="bf16, int8 or fp8 (e4m3): a decode step's projection weights, quantized per output channel "
            "(Llama family, --dtype bf16; the triton set's weight-only kernel, eager's dequantize-then-linear). "
            "Default: the model's --dtype. See docs/quantized.md.",
        ),
    ] = None,
    kernels: Annotated[
        list[str] | None,
        typer.Option(
            "--kernels",
            help="Kernel sets: eager, compile, triton, cuda; for the Llama family also the library sets liger, "
            "flashinfer, fa4 (repeat or comma-separate). Default: the first four on a GPU, eager on a CPU.",
        ),
    ] = None,
    weights: Annotated[
        Path | None,
        # empty, it loaded the current folder as the checkpoint ("" is Path("."))
        path_option(
            "--weights",
            "A local checkpoint directory (save_pretrained); default random.",
            "name a local checkpoint directory (save_pretrained) or leave it out for random weights",
        ),
    ] = None,
    layers: Annotated[
        int | None, typer.Option("--layers", help="Override the preset's depth (quick smoke runs on a CPU).")
    ] = None,
    hf_baseline: Annotated[
        bool,
        typer.Option("--hf-baseline", help="Also time Hugging Face as users run it: SDPA, eager, compile, generate."),
    ] = False,
    out: Annotated[
        Path,
        path_option(
            "--out",
            "Directory for results, tables and plots.",
            "name the folder for results, tables and plots (default: rooflint-out)",
        ),
    ] = Path("rooflint-out/model"),
    device: DeviceOption = None,
    gpu: GpuOption = None,
    spec_file: SpecFileOption = None,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="Skip the per-phase roofline images.")] = False,
) -> None:
    """Run a whole model and show where its time goes, op by op, against the GPU's roofline.

    The model is built from its config with random weights (no network), or loaded from --weights.
    Each kernel set is checked against Hugging Face's eager model first (prefill logits, and greedy
    tokens: all of the first 32 must match in fp32); a set that fails is reported and never timed.
    Then, per set: one prefill forward (B x seq tokens), a greedy decode loop over a paged KV cache
    (one CUDA graph per step on a GPU), and the whole generation are timed; one prefill forward
    and one decode step are profiled and every kernel is attributed to an op (GPT-2: embedding,
    layer_norm, qkv_proj, attention, out_proj, residual, mlp_up_gelu, mlp_down, lm_head, sample;
    Llama: rms_norm, add_rms_norm, rope, o_proj, gate_up_proj, swiglu, down_proj in their place).
    Config and memory are checked before anything is built; a sweep point that cannot fit is
    skipped with the reason while others fit.

    Writes results.csv/.json (for `rooflint report` and `rooflint compare`), model-<config>.md and a
    roofline per set and phase with one point per op, its area its share of the step. See docs/models.md.

    Examples:
      rooflint model gpt2 --config gpt2 --kernels eager,triton --out out/gpt2
      rooflint model llama-3.2-1b --batch 1,8,32,128 --context 512,4096,32768 --hf-baseline
      rooflint model gpt2 --batch 1 --seq 32 --prompt 16 --new-tokens 4 --dtype fp32 --layers 2 --device cpu
    """
    from rooflint.core.errors import UserError
    from rooflint.models import architectures, catalog

    if weights is not None and config is not None:
        # A preset is a config to build random weights from; a checkpoint loads with its own. The
        # --config was ignored, even an unknown one: refused as --layers is with --weights.
        raise UserError(
            f"--config {config} picks a preset to build with random weights; a --weights checkpoint keeps its own "
            "config: give one of them"
        )
    if model not in catalog.BUILTINS and model not in catalog.MODELS:
        # An unknown name, or a config.json that cannot be read or sized, is refused with resolve's own
        # line before torch and transformers load (seconds): resolve reads the file first the same way.
        if model.strip() and catalog._is_path(model):
            architectures.read_config_file(Path(model))
        else:
            catalog.get_model(model)
    if (model in catalog.BUILTINS or model in catalog.MODELS) and config is None and weights_dtype is None:
        _check_before_imports(
            model,
            batch,
            context,
            kernels,
            dtype=dtype,
            seq=seq,
            prompt=prompt,
            new_tokens=new_tokens,
            weights=weights,
            layers=layers,
            out=out,
            device=device,
            gpu=gpu,
            spec_file=spec_file,
        )

    from rich.table import Table

    from rooflint.models.flag_checks import parse_sizes
    from rooflint.models.model_run import run_model
    from rooflint.models.outcome import ModelRequest
    from rooflint.models.quantized_weights import resolve as resolve_weights_dtype
    from rooflint.models.tables import all_tables

    spec, config = catalog.resolve(model, config)
    quantized = resolve_weights_dtype(weights_dtype, dtype, spec.name)  # refused before anything is built
    known = spec.configs  # an unknown --config is refused before anything is built
    if weights is None and config not in known:
        raise UserError(f"unknown {model} config {config!r}; valid: {', '.join(known)}")
    batches, contexts = parse_sizes(batch, "--batch"), parse_sizes(context, "--context")
    sweeping = len(batches) > 1 or contexts is not None
    if quantized and sweeping:
        raise UserError("--weights-dtype int8/fp8 runs one --batch and no --context sweep (sweeps keep bf16 weights)")
    sets = split_named(kernels, "--kernels", "kernel set: eager, compile, triton, cuda")
    request = ModelRequest(
        model=model, config=config, batch=batches[0], seq=seq, prompt=prompt, new_tokens=new_tokens, dtype=dtype,
        weights_dtype=quantized,
        kernels=sets or None, weights=weights, layers=layers, out=out, device=device, gpu=gpu,
        spec_file=spec_file, hf_baseline=hf_baseline, plots=not no_plots,
        sweep_batches=batches if sweeping else None, sweep_contexts=contexts if sweeping else None,
    )  # fmt: skip
    try:
        outcome = run_model(request, log=lambda text: err_console.print(f"[dim]{text}[/]", highlight=False))
    except KeyboardInterrupt:  # said here: typer would turn it into a silent exit 130
        err_console.print(f"[yellow]interrupted[/]: the rows measured before it are in {request.out / 'results.csv'}")
        raise typer.Exit(130) from None
    for title, headers, rows in all_tables(outcome):
        table = Table(title=title, title_justify="left")
        for header in headers:
            table.add_column(header, overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    print_written(outcome.files)
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)


def _check_before_imports(model: str, batch: str, context: str | None, kernels: list[str] | None, **fields) -> None:
    """The checks below, in their order, made before torch and transformers load (seconds) where
    nothing they need is in the model's module: a built-in or spec name without --config or
    --weights-dtype (its preset is its own or the spec's first, and no weight format is judged
    against the spec). Each refusal is the same line run_model's validate, and then its checks of a
    --weights checkpoint, would give once the heavy imports had been made."""
    import importlib.util
    from types import SimpleNamespace

    from rooflint.models import catalog, checkpoint_files
    from rooflint.models.flag_checks import parse_sizes, validate

    batches = parse_sizes(batch, "--batch")
    parse_sizes(context, "--context")
    sets = split_named(kernels, "--kernels", "kernel set: eager, compile, triton, cuda")
    validate(SimpleNamespace(batch=batches[0], kernels=sets or None, **fields))  # the fields ModelRequest reads
    weights = fields["weights"]
    if weights is None or importlib.util.find_spec("transformers") is None:
        return  # without transformers, run_model's first refusal says how to install it
    # run_model's check_checkpoint and then preflight's reading of its config.json, as far as the spec
    # is known without its module: its files and dtypes, and, where the spec names the model_type its
    # checkpoints hold, the architecture and the config as JSON (a loader that reads the config itself
    # judges it first, after the imports).
    checkpoint_files.check_weight_files(weights)
    expected = catalog.checkpoint_model_type(model)
    if expected is not None:
        checkpoint_files.check_model_type(weights, expected)
        checkpoint_files.read_config(weights)
