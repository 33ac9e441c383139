"""The core commands: list, specs, bench and roofline."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.table import Table

from rooflint import bench as bench_engine
from rooflint.ceilings import measured_overlay, roof_spec
from rooflint.cli_support import console, err_console, output_dir, user_errors
from rooflint.errors import UserError
from rooflint.family import DTYPES
from rooflint.plot import plot_roofline, points_from_results
from rooflint.registry import family_names, get_family
from rooflint.results import OK, ResultRow, ResultWriter, read_results
from rooflint.roofline import floor_seconds
from rooflint.specs import all_specs, current_gpu_spec, get_spec
from rooflint.worker import missing_requirement

GpuOption = Annotated[str | None, typer.Option("--gpu", help="GPU spec to judge against (h100_sxm, t4, ...).")]
SpecFileOption = Annotated[
    Path | None,
    typer.Option("--spec-file", help="TOML describing GPUs the table lacks (format: hardware_specs/gpus.toml)."),
]


def _split(values: list[str] | None) -> list[str]:
    return [item.strip() for value in values or [] for item in value.split(",") if item.strip()]


@user_errors
def list_command() -> None:
    """List kernel families, their variants, and whether each can run on this machine.

    Example: rooflint list
    """
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    table = Table(title=f"rooflint families (this machine: {device})")
    for column in ("family", "variant", "kind", "runs here", "what it is"):
        table.add_column(column)
    for name in family_names():
        try:
            family = get_family(name)
        except Exception as error:  # a family that fails to import is reported, not fatal
            table.add_row(name, "-", "-", f"[red]import failed: {error}[/]", "")
            continue
        for variant in family.ordered_variants():
            reason = missing_requirement(variant, device)
            table.add_row(
                name,
                variant.name,
                variant.kind,
                "[green]yes[/]" if reason is None else f"[yellow]{reason}[/]",
                variant.description,
            )
        table.add_section()
    console.print(table)


@user_errors
def specs_command(
    gpu: Annotated[str | None, typer.Argument(help="GPU key or name; all GPUs when omitted.")] = None,
    spec_file: SpecFileOption = None,
) -> None:
    """Show GPU specifications with the source of every number.

    Examples: rooflint specs; rooflint specs h100; rooflint specs mygpu --spec-file mygpu.toml
    """
    specs = [get_spec(gpu, spec_file)] if gpu else list(all_specs(spec_file).values())
    if gpu:
        spec = specs[0]
        table = Table(title=f"{spec.name} [{spec.key}] ({spec.origin})")
        for column in ("field", "value", "source"):
            table.add_column(column, overflow="fold")
        for name, item in spec.values.items():
            flag = " (halved from a with-sparsity figure)" if item.halved_from_sparse else ""
            table.add_row(name, f"{item.value:g}{flag}", item.source + (f" — {item.note}" if item.note else ""))
        console.print(table)
        return
    table = Table(title="GPU specifications (dense peaks; * = halved from a with-sparsity datasheet figure)")
    for column in (
        "key",
        "name",
        "GB/s",
        "tensor bf16",
        "tensor fp16",
        "tensor tf32",
        "tensor fp8",
        "fp32",
        "L2 MiB",
        "SMs",
    ):
        table.add_column(column)
    for spec in specs:

        def cell(field: str, spec=spec) -> str:
            item = spec.values.get(field)
            return "-" if item is None else f"{item.value:g}{'*' if item.halved_from_sparse else ''}"

        table.add_row(
            spec.key,
            spec.name,
            cell("memory_bandwidth_gbps"),
            cell("tensor_bf16_tflops"),
            cell("tensor_fp16_tflops"),
            cell("tensor_tf32_tflops"),
            cell("tensor_fp8_tflops"),
            cell("cuda_fp32_tflops"),
            cell("l2_mib"),
            cell("sm_count"),
        )
    console.print(table)


def _fmt(value: float, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}g}"


def results_table(rows: list[ResultRow]) -> Table:
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
        status = row.status if row.status == OK else f"[red]{row.status}[/]: {row.message}"
        if row.status == "skipped":
            status = f"[yellow]skipped[/]: {row.message}"
        table.add_row(
            row.family,
            row.variant,
            row.dtype,
            row.shape,
            status,
            _fmt(row.median_ms, 4),
            _fmt(row.achieved_tflops),
            _fmt(row.achieved_gbps, 4),
            _fmt(row.ai_flop_per_byte),
            _fmt(row.pct_of_roof),
            row.bound,
            f"{row.speedup_vs_eager:.2f}x" if math.isfinite(row.speedup_vs_eager) else "-",
            row.lint,
        )
    return table


@user_errors
def bench_command(
    families: Annotated[list[str] | None, typer.Argument(help="Families to run, or 'all'.")] = None,
    variants: Annotated[
        list[str] | None, typer.Option("--variants", "-V", help="Variant names or kinds (repeat or comma-separate).")
    ] = None,
    dtype: Annotated[list[str] | None, typer.Option("--dtype", help="fp32, fp16, bf16 or all (default bf16).")] = None,
    size: Annotated[
        str | None,
        typer.Option("--size", help="small, large, or key=value,... (default: large on a GPU, small on CPU)."),
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Directory for results.csv/json and roofline plots.")] = Path(
        "rooflint-out"
    ),
    device: Annotated[str | None, typer.Option("--device", help="cuda or cpu (default: cuda if present).")] = None,
    devices: Annotated[
        str | None, typer.Option("--devices", help="GPU indices to shard families over, e.g. 0,1,2,3.")
    ] = None,
    gpu: GpuOption = None,
    spec_file: SpecFileOption = None,
    cuda_graphs: Annotated[
        bool, typer.Option("--cuda-graphs", help="Time N calls captured in a CUDA graph (no launch gaps).")
    ] = False,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write correctness checks as JUnit XML.")] = None,
    roof: Annotated[
        str,
        typer.Option(
            "--roof", help="Judge % of roof against 'datasheet' ceilings or those `rooflint ceilings` 'measured'."
        ),
    ] = "datasheet",
) -> None:
    """Check every variant against a float64 reference, time it honestly and place it on the roofline.

    Examples:
      rooflint bench all --device cpu --size small
      rooflint bench softmax gelu --size large --dtype bf16 --out out/h100
      rooflint bench attention --size B=1,H=8,N=2048,D=128,causal=1 --variants triton,eager
    """
    import torch

    dtypes = _split(dtype) or ["bf16"]
    if dtypes == ["all"]:
        dtypes = list(DTYPES)
    device_name = bench_engine.resolve_device(device)
    # large fills an H100 with 4x its L2; on a CPU it would take minutes per variant.
    size = size or ("large" if device_name == "cuda" else "small")
    device_indices = _parse_devices(devices)
    request = bench_engine.BenchRequest(
        families=_split(families) or ["all"],
        variants=_split(variants),
        dtypes=dtypes,
        size=size,
        device=device_name,
        devices=device_indices,
        spec_file=str(spec_file) if spec_file else None,
        gpu=gpu,
        cuda_graphs=cuda_graphs,
        roof=roof,
    )
    tasks = bench_engine.plan(request)
    output_dir(out)
    if device_name == "cpu":
        from rooflint.ceilings import measure_cpu_ceilings

        console.print("measuring CPU ceilings (a large copy and a large matmul) ...")
        spec = measure_cpu_ceilings()
    else:
        if device_indices:
            torch.cuda.set_device(device_indices[0])
        spec = roof_spec(current_gpu_spec(spec_file, gpu), roof)
    writer = ResultWriter(out)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    interrupted = False
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        bar = progress.add_task(f"bench on {spec.name}", total=len(tasks))

        def advance(row: ResultRow) -> None:
            progress.update(bar, advance=1, description=f"{row.family}/{row.variant} {row.dtype}: {row.status}")

        try:
            bench_engine.run(request, writer, None if device_name == "cuda" else spec, advance)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            writer.close()
    rows = writer.rows
    console.print(results_table(rows))
    written = _write_plots(rows, spec, out)
    if junit:
        from rooflint.junit import write_junit

        write_junit(rows, junit)
        written.append(junit)
    console.print(f"wrote {writer.csv_path}, {out / 'results.json'}, " + ", ".join(str(p) for p in written))
    if interrupted:
        err_console.print(f"[yellow]interrupted[/]: {len(rows)} rows measured before the interruption are in {out}")
        raise typer.Exit(130)


def _parse_devices(text: str | None) -> list[int]:
    if not text:
        return []
    try:
        indices = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise UserError(f"--devices {text!r} must be comma-separated GPU indices, e.g. 0,1") from None
    import torch

    count = torch.cuda.device_count()
    bad = [i for i in indices if i < 0 or i >= count]
    if bad:
        raise UserError(f"--devices {text!r}: no GPU {bad[0]}; this machine has {count} (valid: 0..{count - 1})")
    return indices


def _write_plots(rows: list[ResultRow], spec, out: Path) -> list[Path]:
    import dataclasses

    if not any(r.status == OK for r in rows):
        return []
    frame = pd.DataFrame([dataclasses.asdict(r) for r in rows])
    title = f"rooflint roofline: {spec.name}"
    return plot_roofline(points_from_results(frame), spec, out / "roofline", title, measured_overlay(spec))


def predicted_points(spec, spec_dtype: str = "bf16") -> pd.DataFrame:
    """Each family's attainable point on ``spec`` from its cost model at the large size."""
    records = []
    dtype = spec_dtype if spec.tensor_peak_tflops(spec_dtype) else "fp16"
    for name in family_names():
        family = get_family(name)
        for _preset, params in family.cases("large"):
            use = dtype if dtype in family.dtypes else family.dtypes[0]
            cost = family.cost(params, use)
            floor, bound = floor_seconds(cost, spec, family.tensor_precision(use))
            if not math.isfinite(floor) or floor <= 0:
                continue
            records.append(
                {
                    "label": f"{name} {use} [{','.join(f'{k}={v}' for k, v in params.items())}]",
                    "family": name,
                    "variant": "roofline",
                    "kind": "",
                    "dtype": use,
                    "ai_flop_per_byte": cost.intensity if cost.bytes else math.nan,
                    "achieved_tflops": cost.flops / floor / 1e12,
                    "achieved_gbps": cost.bytes / floor / 1e9,
                    "point_kind": "predicted",
                    "link": None,
                }
            )
    return pd.DataFrame(records)


@user_errors
def roofline_command(
    results: Annotated[Path | None, typer.Argument(help="results.csv or .json from bench; optional.")] = None,
    gpu: Annotated[str, typer.Option("--gpu", help="GPU whose ceilings to draw (t4, h100, ...).")] = "h100_sxm",
    out: Annotated[Path, typer.Option("--out", help="Directory for roofline.png/.svg/.csv.")] = Path("rooflint-out"),
    spec_file: SpecFileOption = None,
    ceilings: Annotated[
        Path | None,
        typer.Option("--ceilings", help="Directory of `rooflint ceilings` output to draw measured ceilings from."),
    ] = None,
) -> None:
    """Draw a GPU's roofline with every point labelled.

    Results measured on that GPU are plotted as measured points. Results measured on another GPU are
    projected onto this one, and with no results each family's attainable point is predicted from its
    cost model; predicted points are hollow and marked "predicted" in the plot and the CSV.

    Measured ceilings (from `rooflint ceilings`, in the cache or --ceilings DIR) are drawn dashed beside
    the datasheet ones.

    Examples: rooflint roofline --gpu t4; rooflint roofline reports/h100/results.csv --gpu a100_80gb_sxm;
    rooflint roofline reports/h100/results.csv --gpu h100 --ceilings reports/ceilings
    """
    spec = get_spec(gpu, spec_file)
    output_dir(out)
    if results is None:
        points = predicted_points(spec)
        title = f"{spec.name}: predicted attainable points from rooflint's cost models"
    else:
        frame = read_results(results)
        here = frame[frame["gpu"] == spec.key]
        if len(here):
            points = points_from_results(here)
            title = f"{spec.name}: measured"
        else:
            from rooflint.projection import project

            points = project(frame, spec)
            title = f"{spec.name}: projected from results measured on {', '.join(sorted(set(frame['gpu'])))}"
    written = plot_roofline(points, spec, out / f"roofline-{spec.key}", title, measured_overlay(spec, ceilings))
    console.print("wrote " + ", ".join(str(p) for p in written))


def register(app: typer.Typer) -> None:
    app.command("list")(list_command)
    app.command("specs")(specs_command)
    app.command("bench")(bench_command)
    app.command("roofline")(roofline_command)
