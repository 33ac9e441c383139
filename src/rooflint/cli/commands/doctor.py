"""`rooflint doctor`: is this GPU fit to benchmark on? One verdict line; exit 1 when it is not."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from rooflint.cli.console import console, print_written, user_errors
from rooflint.cli.options import GpuOption, SpecFileOption, path_option


@user_errors
def doctor_command(
    json_path: Annotated[
        Path | None,
        path_option(
            "--json",
            "Also save the report as JSON to this file.",
            "name the JSON file to write, or leave it out",
            file=True,
        ),
    ] = None,
    gpu: GpuOption = None,
    spec_file: SpecFileOption = None,
) -> None:
    """Check the GPU before benchmarking: driver, clocks idle and under load, power limit, clock-event
    reasons, other processes, ECC and persistence mode, copy and bf16 matmul ceilings against the
    datasheet, and rooflint's timer against triton.testing.do_bench. Takes about half a minute.

    Ends with one verdict line: "fit to benchmark", or "unfit: <reasons>" and exit code 1 (throttled
    under load, a thermal or hardware slowdown, another process on the GPU, timers that disagree by
    more than 5%, no GPU). It only reads: it never changes clocks, power limits or other settings.

    Examples:
      rooflint doctor
      rooflint doctor --json reports/h100/doctor.json
    """
    import json

    from rooflint.core.paths import writable_file, write_text
    from rooflint.core.specs import get_spec, load_spec_file
    from rooflint.engine.doctor import TorchProbe, diagnose

    # Bad input is refused before the half minute of checks and the table, not after them.
    if spec_file is not None:
        load_spec_file(spec_file)
    if gpu is not None:
        get_spec(gpu, spec_file)
    if json_path is not None:
        writable_file(json_path, "doctor report")
    report = diagnose(TorchProbe(str(spec_file) if spec_file else None, gpu))
    console.print(report_table(report))
    for note in report.notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    if json_path is not None:
        write_text(json_path, json.dumps(report.to_dict(), indent=1) + "\n", "doctor report")
        print_written([json_path])
    colour = "green" if report.fit else "red"
    console.print(f"[bold {colour}]verdict:[/] {report.verdict}", highlight=False, soft_wrap=True)
    raise typer.Exit(report.exit_code)


def _num(value: float, unit: str, digits: int = 0) -> str:
    return f"{value:,.{digits}f} {unit}" if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def _mode(value: bool | None) -> str:
    return "unknown" if value is None else ("on" if value else "off")


def _vs(measured: float, sheet: float, unit: str) -> str:
    text = _num(measured, unit)
    if math.isfinite(measured) and math.isfinite(sheet) and sheet > 0:
        text += f" = {measured / sheet:.0%} of the datasheet's {sheet:,.0f}"
    return text


def report_table(report):
    from rich.table import Table

    table = Table(title="rooflint doctor", show_header=False)
    table.add_column("check")
    table.add_column("reading", overflow="fold")
    if not report.gpu_name and not report.cuda_device:
        table.add_row("GPU", "none found" + (f" ({report.nvml_error})" if report.nvml_error else ""))
        return table
    table.add_row("GPU", report.gpu_name or report.cuda_device)
    table.add_row("driver", report.driver_version or "-")
    table.add_row("persistence mode / ECC", f"{_mode(report.persistence_mode)} / {_mode(report.ecc_enabled)}")
    table.add_row("power limit", _num(report.power_limit_w, "W"))
    maximum = f"max {_num(report.max_sm_clock_mhz, 'MHz')}, datasheet boost {_num(report.boost_clock_mhz, 'MHz')}"
    table.add_row("SM clock idle", f"{_num(report.idle_sm_clock_mhz, 'MHz')} ({maximum})")
    loaded = f"{_num(report.loaded_sm_clock_mhz, 'MHz')} median, {_num(report.loaded_sm_clock_min_mhz, 'MHz')} min"
    table.add_row("SM clock under load (0.3 s bf16 matmuls after 0.5 s)", loaded)
    idle = _num(report.temperature_c, "C")
    power = f"{_num(report.loaded_power_w, 'W')}, {_num(report.loaded_temperature_c, 'C')} (idle {idle})"
    table.add_row("power, temperature under load", power)
    reasons = (
        f"idle: {', '.join(report.idle_reasons) or 'none'}; under load: {', '.join(report.loaded_reasons) or 'none'}"
    )
    table.add_row("clock-event reasons", reasons)
    table.add_row("other processes on the GPU", ", ".join(report.other_processes) or "none")
    table.add_row("copy bandwidth", _vs(report.copy_gbps, report.copy_datasheet_gbps, "GB/s"))
    table.add_row("bf16 matmul", _vs(report.matmul_bf16_tflops, report.matmul_bf16_datasheet_tflops, "TFLOP/s"))
    ratio = report.timer_ratio
    timer = f"{_num(report.timer_ms, 'ms', 3)} vs do_bench {_num(report.do_bench_ms, 'ms', 3)}"
    table.add_row("timer on a 1 GiB copy", timer + (f" (ratio {ratio:.3f})" if math.isfinite(ratio) else ""))
    return table
