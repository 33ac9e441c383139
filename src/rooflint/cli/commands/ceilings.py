"""`rooflint ceilings`: measure this machine's real ceilings and store them beside the datasheet's."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from rich.markup import escape

from rooflint.cli.console import console, print_written, user_errors
from rooflint.cli.options import DeviceOption, GpuOption, SpecFileOption, path_option

# The unit each measured ceiling is shown in; every other field is a peak in TFLOP/s.
CEILING_UNITS = {"memory_bandwidth_gbps": "GB/s", "l2_bandwidth_gbps": "GB/s", "l2_mib": "MiB", "sm_count": ""}


@user_errors
def ceilings_command(
    out: Annotated[
        Path | None,
        path_option(
            "--out",
            "Directory for <gpu>.toml (default: the user cache, see below).",
            "name the folder for <gpu>.toml, or leave it out for the user cache",
        ),
    ] = None,
    device: DeviceOption = None,
    gpu: GpuOption = None,
    spec_file: SpecFileOption = None,
) -> None:
    """Measure DRAM and L2 bandwidth, tensor-core peaks per dtype and the CUDA-core FP32 peak.

    Stored as <gpu>.toml in --out, else in $ROOFLINT_CACHE/ceilings, else ~/.cache/rooflint/ceilings,
    where `rooflint lint --roof measured` and the roofline plots find them. On a CPU it measures a
    large copy and a large matmul, as bench does at the start of a CPU run.

    Examples:
      rooflint ceilings
      rooflint ceilings --out reports/ceilings
    """
    from rich.table import Table

    from rooflint.engine.ceiling_flags import CPU_KEY, check_flags, refuse_folder_over

    # measure_and_store makes these checks first, in this order; here they come before torch's import.
    on_cpu, directory = check_flags(device, out, spec_file, gpu)
    if on_cpu:  # a GPU's file is named after the GPU, which only torch can tell
        refuse_folder_over(directory, CPU_KEY)
    from rooflint.engine.ceilings import measure_and_store

    # The device's name and the --out path are printed escaped: rich reads "[/x]" in a folder's name as
    # a closing tag and raised after <gpu>.toml was written (a traceback, exit 1 for a stored file).
    stored = measure_and_store(
        device, out, spec_file, gpu, on_note=lambda message: console.print(escape(message), highlight=False)
    )
    table = Table(title=escape(f"ceilings of {stored.name}: measured vs datasheet"))
    for column in ("ceiling", "measured", "datasheet", "measured / datasheet"):
        table.add_column(column)
    for field, value in sorted(stored.values.items()):
        unit = CEILING_UNITS.get(field, "TFLOP/s")
        sheet = stored.datasheet.get(field) if stored.datasheet else None
        ratio = f"{value / sheet:.2f}" if sheet else "-"
        table.add_row(field, f"{value:,.4g} {unit}", f"{sheet:,.4g} {unit}" if sheet else "-", ratio)
    console.print(table)
    print_written([stored.path])
