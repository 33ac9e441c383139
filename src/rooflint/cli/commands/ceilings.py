"""`rooflint ceilings`: measure this machine's real ceilings and store them beside the datasheet's."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rooflint.cli.console import console, user_errors

UNITS = {"memory_bandwidth_gbps": "GB/s", "l2_bandwidth_gbps": "GB/s", "l2_mib": "MiB", "sm_count": ""}


@user_errors
def ceilings_command(
    out: Annotated[
        Path | None, typer.Option("--out", help="Directory for <gpu>.toml (default: the user cache, see below).")
    ] = None,
    device: Annotated[str | None, typer.Option("--device", help="cuda or cpu (default: cuda if present).")] = None,
    spec_file: Annotated[
        Path | None, typer.Option("--spec-file", help="TOML describing a GPU the table lacks.")
    ] = None,
) -> None:
    """Measure DRAM and L2 bandwidth, tensor-core peaks per dtype and the CUDA-core FP32 peak.

    Stored as <gpu>.toml in --out, else in $ROOFLINT_CACHE/ceilings, else ~/.cache/rooflint/ceilings,
    where `rooflint lint --roof measured` and the roofline plots find them. On a CPU it measures a
    large copy and a large matmul, as bench does at the start of a CPU run.

    Examples:
      rooflint ceilings
      rooflint ceilings --out reports/ceilings
    """
    from rooflint.core import roofs
    from rooflint.engine import ceilings
    from rooflint.engine.bench import resolve_device

    device_name = resolve_device(device)
    if device_name == "cpu":
        spec = ceilings.measure_cpu_ceilings()
        key, name, datasheet = "cpu", "CPU", None
        values = {k: v.value for k, v in spec.values.items()}
    else:
        import torch

        from rooflint.core.specs import current_gpu_spec

        datasheet = current_gpu_spec(spec_file)
        key, name = datasheet.key, torch.cuda.get_device_name()
        console.print(f"measuring ceilings of {name} (about a minute) ...")
        values = ceilings.measure_gpu_ceilings()
    path = roofs.save_ceilings(key, name, values, out, f", torch {torch.__version__}" if device_name == "cuda" else "")
    table = Table(title=f"ceilings of {name}: measured vs datasheet")
    for column in ("ceiling", "measured", "datasheet", "measured / datasheet"):
        table.add_column(column)
    for field, value in sorted(values.items()):
        unit = UNITS.get(field, "TFLOP/s")
        sheet = datasheet.get(field) if datasheet else None
        ratio = f"{value / sheet:.2f}" if sheet else "-"
        table.add_row(field, f"{value:,.4g} {unit}", f"{sheet:,.4g} {unit}" if sheet else "-", ratio)
    console.print(table)
    console.print(f"wrote {path}")


def register(app: typer.Typer) -> None:
    app.command("ceilings")(ceilings_command)
