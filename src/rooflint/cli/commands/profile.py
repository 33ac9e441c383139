"""`rooflint profile FAMILY`: kernels per variant (proof of fusion) and, with --ncu, counter-measured bytes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from rooflint.cli.console import console, err_console, print_written, user_errors
from rooflint.cli.options import DeviceOption, GpuOption, SpecFileOption, VariantsOption, path_option, split_named


@user_errors
def profile_command(
    family: Annotated[str, typer.Argument(help="The family to profile, e.g. gelu.")],
    variants: VariantsOption = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            help="One dtype the family has: fp32, fp16, bf16, fp8_e4m3, int8, w8a16, ... "
            "(default bf16, else the family's own).",
        ),
    ] = None,
    size: Annotated[
        str | None, typer.Option("--size", help="small (default), large, or key=value,... (first shape of a preset).")
    ] = None,
    device: DeviceOption = None,
    ncu: Annotated[
        bool,
        typer.Option(
            "--ncu",
            help="Also collect with Nsight Compute: DRAM/L2 bytes and FLOPs, and what limits each variant "
            "(busiest unit, issue, occupancy, stall reasons).",
        ),
    ] = False,
    sass: Annotated[
        bool,
        typer.Option(
            "--sass",
            help="With --ncu: where each variant's warps wait, instruction by instruction (ncu's SASS source "
            "page): stall samples and executions by kind of instruction, the hottest instructions, and "
            "against the first variant named the opcodes whose counts differ most.",
        ),
    ] = False,
    out: Annotated[
        Path | None,
        path_option(
            "--out",
            "Directory for kernels.csv, ncu.csv and the ncu roofline (rooflint-out/profile).",
            "name the folder for kernels.csv and ncu.csv (default: rooflint-out/profile)",
        ),
    ] = None,
    gpu: GpuOption = None,
    spec_file: SpecFileOption = None,
) -> None:
    """List each variant's kernels and their share of device time; with --ncu, its traffic and what limits it.

    Examples:
      rooflint profile gelu --size large
      rooflint profile softmax -V eager_unfused -V triton --size large --ncu --out reports/ncu
      rooflint profile attention -V cuda_hopper,flash_attn_4 --size B=4,H=32,N=4096,D=128,causal=0 --ncu --sass
    """
    names = split_named(variants, "--variants")  # a `-V ,` is refused before torch's import (seconds)
    from rooflint.core.registry import family_source
    from rooflint.engine.device import resolve_device
    from rooflint.engine.profile_flags import check_flags

    # What run_profile judges first, in its order, where the family module and torch are not needed:
    # an unknown family, device, --sass without --ncu, a spec file or --gpu refused at once.
    family_source(family)
    check_flags(None if device is None else resolve_device(device), ncu, sass, spec_file, gpu)
    from rooflint.engine.profile import run_profile

    outcome = run_profile(
        family,
        variants=names,
        dtype=dtype,
        size=size,
        device=device,
        ncu=ncu,
        sass=sass,
        out=out,
        spec_file=spec_file,
        gpu=gpu,
        # Notes, kernel names, reasons and paths are a kernel's, a library's or the user's text, escaped
        # wherever printed: rich reads "[/x]" in them as a closing tag and raises (a traceback and exit 1
        # after kernels.csv was written) and drops "[abi:cxx11]" or "[bold]" without a word.
        on_note=lambda message: err_console.print(escape(message), highlight=False),
    )
    console.print(_kernels_table(outcome))
    if outcome.ncu_rows:
        console.print(_ncu_table(outcome))
        console.print(_why_table(outcome))
        for r in outcome.ncu_rows:  # whole lines: a verdict folded inside a table cell is hard to read
            console.print(escape(f"{r.variant}: {r.limiter}"), highlight=False, soft_wrap=True)
    for table in _sass_tables(outcome.sass):
        console.print(table)
    print_written(outcome.written)
    if outcome.interrupted:  # said here: user_errors' line would not say that the files hold anything
        err_console.print("[yellow]interrupted[/]: the variants profiled before it are in the files above")
        raise typer.Exit(130)
    if outcome.failed:  # a wrong or broken variant fails the profile, as it fails a bench
        names = ", ".join(s.variant for s in outcome.failed)
        err_console.print(
            f"not profiled, failed their check or errored: {escape(names)} (see the table)", highlight=False
        )
        raise typer.Exit(1)
    if ncu and not outcome.ncu_rows:
        raise typer.Exit(1)  # ncu profiled nothing: each variant's reason is printed above


def _kernels_table(outcome):
    from rich.table import Table

    from rooflint.core.fmt import fmt

    table = Table(
        title=escape(f"{outcome.family} {outcome.dtype} {outcome.size}: kernels per call on {outcome.device}")
    )
    for column in ("variant", "kernel", "launches/call", "us/call", "share %"):
        table.add_column(column, overflow="fold")
    for s in outcome.shares:
        kernel = s.kernel[:90] if s.status == "ok" else f"{s.status}: {s.message}"  # not profiled, and why
        table.add_row(
            escape(s.variant), escape(kernel), fmt(s.calls_per_call), fmt(s.device_us_per_call), fmt(s.share_pct)
        )
    return table


def _ncu_table(outcome):
    from rich.table import Table

    from rooflint.core.fmt import fmt

    table = Table(title=escape(f"{outcome.family} {outcome.dtype} {outcome.size}: analytic vs ncu-measured"))
    for column in (
        "variant",
        "kernels",
        "ms",
        "model MiB",
        "DRAM MiB",
        "ratio",
        "L2 MiB",
        "L2 / SM byte",
        "AI model",
        "AI ncu",
        "notes",
    ):
        table.add_column(column, overflow="fold")
    for r in outcome.ncu_rows:
        model = r.modeled_bytes if math.isfinite(r.modeled_bytes) else r.ideal_bytes
        table.add_row(
            escape(r.variant),
            str(r.kernels),
            fmt(r.time_ms),
            fmt(model / 2**20),
            fmt(r.measured_dram_bytes / 2**20),
            fmt(r.bytes_ratio),
            fmt(r.measured_l2_bytes / 2**20),
            fmt(r.l2_per_sm_byte),
            fmt(r.analytic_ai),
            fmt(r.measured_ai),
            escape(r.notes),
        )
    return table


def _why_table(outcome):
    """What holds each variant: its longest kernel's busiest units, its warps' waits, its resources."""
    from rich.table import Table

    from rooflint.core.fmt import fmt

    table = Table(title=escape(f"{outcome.family} {outcome.dtype} {outcome.size}: what limits each variant (ncu)"))
    columns = (
        "variant",
        "main kernel",
        "DRAM %",
        "SM %",
        "issue %",
        "tensor %",
        "occup. %",
        "regs",
        "block",
        "smem KiB",
    )
    for column in (*columns, "instr. M", "cycles/instr.", "top stalls (cycles/instr.)"):
        table.add_column(column, overflow="fold")
    for r in outcome.ncu_rows:
        share = f" ({r.main_kernel_share_pct:.0f}%)" if r.kernels > 1 and math.isfinite(r.main_kernel_share_pct) else ""
        table.add_row(
            escape(r.variant),
            escape(r.main_kernel[:40] + share),
            fmt(r.dram_pct),
            fmt(r.sm_pct),
            fmt(r.issue_pct),
            fmt(r.tensor_pipe_pct),
            fmt(r.occupancy_pct),
            fmt(r.registers),
            fmt(r.block),
            fmt(r.smem_bytes / 1024),
            fmt(r.instructions / 1e6),
            fmt(r.cycles_per_issue),
            escape(r.top_stalls),
        )
    return table


def _sass_tables(kernels):
    """Per variant: its main kernel's samples by kind of instruction and its hottest instructions;
    then each later variant's opcode counts against the first's."""
    from rich.table import Table

    from rooflint.analysis import sass
    from rooflint.core.fmt import fmt

    tables = []
    for variant, kernel in kernels.items():
        title = escape(f"{variant}: where the warps wait ({sass.short_name(kernel.name)}, ncu SASS samples)")
        table = Table(title=title)
        for column in ("instructions", "executed M", "samples %", "top stall reasons"):
            table.add_column(column, overflow="fold")
        for share in sass.class_shares(kernel):
            table.add_row(share.name, fmt(share.executed / 1e6), f"{share.share_pct:.1f}", escape(share.top_reasons))
        tables.append(table)
        hot = Table(title=escape(f"{variant}: the instructions holding the most samples"))
        for column in ("address", "instruction", "executed M", "samples %", "reasons"):
            hot.add_column(column, overflow="fold")
        for line, share, reasons in sass.hottest(kernel):
            hot.add_row(
                line.address[-6:], escape(line.source[:70]), fmt(line.executed / 1e6), f"{share:.1f}", escape(reasons)
            )
        tables.append(hot)
    names = list(kernels)
    for variant in names[1:]:
        first = names[0]
        table = Table(title=escape(f"{variant} against {first}: the opcodes whose executions differ most"))
        for column in ("opcode", f"{variant} M", f"{first} M", f"{variant} samples %", f"{first} samples %"):
            table.add_column(column, overflow="fold")
        for d in sass.opcode_deltas(kernels[variant], kernels[first]):
            table.add_row(d.opcode, fmt(d.executed / 1e6), fmt(d.baseline_executed / 1e6),
                          f"{d.samples_pct:.1f}", f"{d.baseline_samples_pct:.1f}")  # fmt: skip
        tables.append(table)
    return tables
