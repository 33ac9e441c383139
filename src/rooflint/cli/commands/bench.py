"""`rooflint bench`: check, time and place every variant on the roofline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rooflint.cli.console import console, err_console, print_written, user_errors
from rooflint.cli.options import (
    DeviceOption,
    GpuOption,
    NoReferenceCacheOption,
    RoofOption,
    SizeOption,
    SpecFileOption,
    VariantsOption,
    path_option,
    split_named,
)
from rooflint.core.errors import UserError
from rooflint.core.fmt import fmt


@user_errors
def bench_command(
    families: Annotated[list[str] | None, typer.Argument(help="Families to run, or 'all'.")] = None,
    variants: VariantsOption = None,
    dtype: Annotated[
        list[str] | None,
        typer.Option(
            "--dtype",
            help="fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, int8, w8a16, wfp8a16 or all; a family runs those it has. "
            "Default: bf16, or a family's own precisions where it has no bf16 (the quantized families: "
            "rooflint list names them).",
        ),
    ] = None,
    size: SizeOption = None,
    out: Annotated[
        Path,
        # empty, it wrote the run into the current folder, moving its results.* aside as .prev
        path_option(
            "--out",
            "Directory for results.csv/json and roofline plots.",
            "name the folder for results.csv/json (default: rooflint-out)",
        ),
    ] = Path("rooflint-out"),
    device: DeviceOption = None,
    devices: Annotated[
        str | None, typer.Option("--devices", help="GPU indices to run on, e.g. 0,1,2,3: one worker each.")
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler",
            help="Run on a Dask cluster: 'local' (one worker per GPU of --devices, or of this machine) or a "
            "scheduler address, e.g. tcp://head:8786. Needs rooflint's dask extra (docs/fleet.md).",
        ),
    ] = None,
    gpu_types: Annotated[
        str | None,
        typer.Option(
            "--gpu-types",
            help="GPU types of the cluster to run on, e.g. h100_sxm,a100_80gb_sxm; each runs the whole plan "
            "(default: every type the workers offer).",
        ),
    ] = None,
    gpu: GpuOption = None,
    spec_file: SpecFileOption = None,
    cuda_graphs: Annotated[
        bool, typer.Option("--cuda-graphs", help="Time N calls captured in a CUDA graph (no launch gaps).")
    ] = False,
    junit: Annotated[
        Path | None,
        path_option(
            "--junit",
            "Write correctness checks as JUnit XML.",
            "name the JUnit XML file to write, e.g. junit.xml, or leave it out",
            file=True,
        ),
    ] = None,
    roof: RoofOption = None,
    # The measuring settings' defaults live in rooflint.engine.settings; None here means "the default".
    regime: Annotated[
        str | None,
        typer.Option(
            "--regime",
            help="burst (the default): spin-separated calls near boost clock (reproducible); sustained: back "
            "to back after a heat-up, at the power cap as a training loop runs (docs/timing.md).",
        ),
    ] = None,
    max_noise: Annotated[
        float | None,
        typer.Option(
            "--max-noise",
            help="Let a memory-bound burst row stop sampling once its median's 95% interval is within this "
            "share of it, e.g. 0.005 (after 50 ms of samples, never in a window at the power cap); 0, the "
            "default, takes the full 200 ms (docs/timing.md).",
        ),
    ] = None,
    throttle_threshold: Annotated[
        float | None,
        typer.Option(
            "--throttle-threshold",
            help="A row whose median SM clock is under this share of the clock measured under load at "
            "start is throttled, and re-timed.",
        ),
    ] = None,
    throttle_retries: Annotated[
        int | None,
        typer.Option("--throttle-retries", help="Re-timings of a throttled row before it is kept and marked."),
    ] = None,
    recovery_delay: Annotated[
        float | None, typer.Option("--recovery-delay", help="Seconds to wait before re-timing a throttled row.")
    ] = None,
    no_reference_cache: NoReferenceCacheOption = False,
    no_plots: Annotated[
        bool, typer.Option("--no-plots", help="Write results.csv and results.json only: no roofline images or CSV.")
    ] = False,
) -> None:
    """Check every variant against a float64 reference, time it honestly and place it on the roofline.

    Exit code: 0 when every runnable row was measured and passed its check (skipped rows, such as
    CUDA variants on a machine without a GPU, do not fail a run), 1 when any row failed its check or
    errored, 2 on bad input. The last line says where the wall time went (results.json's "run").

    Examples:
      rooflint bench all --device cpu --size small
      rooflint bench softmax gelu --size large --dtype bf16 --out out/h100
      rooflint bench attention --size B=1,H=8,N=2048,D=128,causal=1 --variants triton,eager
    """
    from rich.progress import Progress

    from rooflint.core.roofs import DEFAULT_ROOF
    from rooflint.engine.flag_checks import check_flags
    from rooflint.engine.request import BenchRequest
    from rooflint.engine.settings import MeasureSettings

    measure = MeasureSettings.from_options(
        regime=regime,
        cuda_graphs=cuda_graphs,
        max_noise=max_noise,
        throttle_threshold=throttle_threshold,
        throttle_retries=throttle_retries,
        recovery_delay_s=recovery_delay,
    )
    request = BenchRequest(
        families=split_named(families, "families") or ["all"],
        variants=split_named(variants, "--variants"),
        dtypes=split_named(dtype, "--dtype"),
        size=size,
        device=device,
        devices=_parse_devices(devices),
        scheduler=scheduler,
        gpu_types=split_named(None if gpu_types is None else [gpu_types], "--gpu-types", "GPU type, e.g. h100_sxm"),
        spec_file=str(spec_file) if spec_file else None,
        gpu=gpu,
        roof=roof or DEFAULT_ROOF,
        out=out,
        junit=junit,
        measure=measure,
        reference_cache=not no_reference_cache,
        plots=not no_plots,
    )
    check_flags(request)  # before torch's import: a bad flag is answered at once
    from rooflint.engine import bench as engine

    planned = engine.prepare(request)
    if measure.max_noise and (measure.regime == "sustained" or cuda_graphs):
        err_console.print(
            "note: --max-noise stops only burst rows timed by events; "
            + ("sustained rows" if measure.regime == "sustained" else "CUDA-graph replays")
            + " take their full budget (docs/timing.md)",
            highlight=False,
            soft_wrap=True,
        )
    if cuda_graphs and planned.request.device != "cuda":
        err_console.print(
            "note: --cuda-graphs does nothing on the CPU (CUDA graphs replay GPU launches); rows are timed as usual",
            highlight=False,
            soft_wrap=True,
        )
    columns = progress_columns()
    with Progress(*columns, console=console, transient=True) as progress:
        # A fleet runs the whole plan once per GPU type asked for.
        total = len(planned.tasks) * max(1, len(planned.request.gpu_types))
        bar = progress.add_task(f"bench on {planned.request.device}", total=total)

        def advance(row) -> None:
            progress.update(bar, advance=1, description=f"{row.family}/{row.variant} {row.dtype}: {row.status}")

        outcome = engine.execute(planned, advance)
    console.print(results_table(outcome.rows))
    files = [outcome.csv_path, out / "results.json", *outcome.written]
    print_written(files)
    if outcome.run is not None:
        from rooflint.engine.run_clock import summary_line

        console.print(summary_line(outcome.run), highlight=False, soft_wrap=True)
    if outcome.interrupted:
        err_console.print(f"[yellow]interrupted[/]: {len(outcome.rows)} rows measured before it are in {out}")
        raise typer.Exit(130)
    if outcome.exit_code:
        err_console.print("[red]some rows failed their check or errored[/]: see the status column")
    raise typer.Exit(outcome.exit_code)


def progress_columns() -> tuple:
    """The bench's progress bar: what ran last, the bar, rows done of all, time so far and the ETA
    (rich estimates it from the recent pace of rows)."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return (
        # The last row's family/variant, as written: a plugin's "odd[/x]" read as markup raised in the
        # bar's refresh thread.
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )


def _parse_devices(text: str | None) -> list[int]:
    if text is None:
        return []
    try:
        indices = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        indices = []
    if not indices:  # `--devices ''` (an empty variable) must not quietly mean "the default GPU"
        raise UserError(f"--devices {text!r} must be comma-separated GPU indices, e.g. 0,1")
    return indices


def results_table(rows):
    """The bench table printed at the end of a run."""
    import math

    from rich.markup import escape
    from rich.table import Table

    from rooflint.outputs.results import OK, SKIPPED

    table = Table(title="rooflint bench")
    for column in (
        "family",
        "variant",
        "dtype",
        "shape",
        "status",
        "median ms",
        "TFLOP/s",
        "GB/s",
        "AI",
        "% roof",
        "bound",
        "vs eager",
        "lint",
    ):
        table.add_column(column, overflow="fold")
    for row in rows:
        # A variant's exception, a plugin's names: their text, printed as written, never read as markup
        # ("[/x]" in an error raised before the table was printed).
        message = escape(row.message)
        status = row.status if row.status == OK else f"[red]{escape(row.status)}[/]: {message}"
        if row.status == SKIPPED:
            status = f"[yellow]skipped[/]: {message}"
        table.add_row(
            escape(row.family),
            escape(row.variant),
            escape(row.dtype),
            escape(row.shape),
            status,
            fmt(row.median_ms, 4),
            fmt(row.achieved_tflops),
            fmt(row.achieved_gbps, 4),
            fmt(row.ai_flop_per_byte),
            fmt(row.pct_of_roof),
            row.bound,
            f"{row.speedup_vs_eager:.2f}x" if math.isfinite(row.speedup_vs_eager) else "-",
            escape(row.lint),
        )
    return table
