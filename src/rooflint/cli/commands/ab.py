"""`rooflint ab FAMILY`: variants, git refs, source files or meta-parameter sets of one family, side by side."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from rooflint.cli.console import console, err_console, print_written, user_errors
from rooflint.cli.options import (
    DeviceOption,
    SizeOption,
    VariantsOption,
    path_not_empty,
    path_option,
    split,
    split_named,
)


@user_errors
def ab_command(
    family: Annotated[str, typer.Argument(help="The family whose entries to compare, e.g. softmax.")],
    variants: VariantsOption = None,
    ref: Annotated[
        list[str] | None,
        typer.Option("--ref", help="A git ref to take the family from (repeat; 'worktree': as installed now)."),
    ] = None,
    source: Annotated[
        list[Path] | None,
        # empty, it was refused as "--source .: not a readable .py file", a path the caller never typed
        typer.Option(
            "--source",
            help="A file holding the family module (repeat).",
            parser=path_not_empty("--source", "name a .py file holding the family module"),
            metavar="<path>",
        ),
    ] = None,
    config: Annotated[
        list[str] | None,
        typer.Option("--config", help="NAME=V1,V2: meta-parameter values (repeat; entries take the cross product)."),
    ] = None,
    size: SizeOption = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            help="One dtype the family has: fp32, fp16, bf16, fp8_e4m3, int8, w8a16, ... "
            "(default: bf16 where the family has it, else its first).",
        ),
    ] = None,
    device: DeviceOption = None,
    rounds: Annotated[int, typer.Option("--rounds", help="Rounds; each times every entry once per regime.")] = 5,
    regime: Annotated[
        list[str] | None,
        typer.Option("--regime", help="burst and/or sustained (repeat or comma-separate; default both)."),
    ] = None,
    csv: Annotated[
        Path | None,
        # empty, it was refused as "--csv . is a folder", a path the caller never typed
        path_option(
            "--csv", "Also write the table to this CSV file.", "name a CSV file, or leave --csv out", file=True
        ),
    ] = None,
) -> None:
    """Compare entries of one family: check each against float64, then time them in alternating rounds.

    An entry is a variant, as installed, at a git ref (--ref) or from a file (--source), under each
    meta-parameter set (--config). A failing entry is reported and dropped. The table gives each
    entry's median, its speedup over the first entry with a 95% interval, its wins per round,
    joules per call, SM clock and board power (NVML) and a verdict: faster, slower or within noise.
    Exit 1 when an entry failed its check or raised while timed. docs/ab.md has the details.

    Examples:
      rooflint ab attention --variants triton,triton_gluon --size large --dtype bf16
      rooflint ab softmax -V triton --ref HEAD~3 --ref HEAD
      rooflint ab softmax -V triton --source old.py --source src/rooflint/kernels/softmax/__init__.py
      rooflint ab softmax -V triton --config BLOCK_R=1,2,4 --config num_warps=4,8 --csv ab.csv
      rooflint ab softmax -V eager,eager_unfused --size small --rounds 3 --regime burst
    """
    regimes = tuple(split_named(regime, "--regime", "of burst, sustained"))  # refused before torch's import
    from rooflint.engine.ab import AbSettings, run_ab

    settings = AbSettings(
        family=family,
        variants=tuple(split(variants)),
        refs=tuple(ref or ()),
        sources=tuple(source or ()),
        configs=tuple(config or ()),
        size=size,
        dtype=dtype,
        device=device,
        rounds=rounds,
        regimes=regimes or AbSettings.regimes,
    )
    if csv is not None:
        _check_writable(csv, source or [])
    # Labels (a --source file's name), notes and reasons (an entry's own exception) are the user's or a
    # kernel's text, escaped wherever printed: rich reads "[/x]" in them as a closing tag and raises (a
    # traceback, the rounds and the --csv lost) and drops "[bold]" without a word.
    outcome = run_ab(settings, on_note=lambda message: err_console.print(escape(message), highlight=False))
    for shape in dict.fromkeys(s.shape for s in outcome.summaries):
        console.print(_table(outcome, shape))
    for shape, failed in outcome.failures.items():
        for label, why in failed.items():
            console.print(
                f"[red]failed its float64 check, not timed:[/] {escape(label)} at {shape}: {escape(why)}",
                highlight=False,
            )
    for shape, skipped in outcome.skips.items():
        for label, why in skipped.items():
            console.print(f"[yellow]skipped, not timed:[/] {escape(label)} at {shape}: {escape(why)}", highlight=False)
    for shape, raised in outcome.errors.items():
        for label, why in raised.items():
            console.print(
                f"[red]dropped from the rounds:[/] {escape(label)} at {shape}: {escape(why)}", highlight=False
            )
    console.print(
        # The first entry named, or the first that passed its check where an earlier one failed.
        "x first: the baseline's time (the first entry timed) / this one's, the geometric mean of the per-round "
        "ratios with a "
        f"{settings.confidence:.0%} t-interval; wins: rounds in which the entry was the fastest",
        style="dim",
    )
    if csv is not None:
        _write_csv(csv, outcome, settings.confidence)
        print_written([csv])
    if outcome.interrupted:  # said here: typer would turn Ctrl-C into a silent exit 130, the rounds lost
        kept = f" and in {escape(str(csv))}" if csv is not None else ""
        err_console.print(f"[yellow]interrupted[/]: the rounds completed before it are in the table{kept}")
        raise typer.Exit(130)
    if outcome.failures or outcome.errors:
        raise typer.Exit(1)


def _check_writable(path: Path, sources: list[Path]) -> None:
    """Open the file for writing before the rounds, not after them: a folder that exists but takes
    no file (read-only, /proc) must cost one line and exit 2, not an A/B's minutes and a crash. A
    --source is an input: the table written over it replaced the kernel's only copy, exit 0."""
    from rooflint.core.errors import UserError
    from rooflint.core.paths import probe_writable_file
    from rooflint.outputs.result_file import refuse_reading_and_writing

    if path.is_dir():
        raise UserError(f"--csv {path} is a folder; give a file name")
    refuse_reading_and_writing(path, sources, "--csv")
    # Probed, not created: an unknown variant or a bad --config is refused after this check, and
    # must not leave the folders on the way to the file behind; _write_csv creates them.
    probe_writable_file(path, "--csv file")


def _table(outcome, shape: str):
    from rich.table import Table

    from rooflint.analysis.ab_stats import FASTER, SLOWER
    from rooflint.core.fmt import fmt

    rounds = max(s.rounds for s in outcome.summaries if s.shape == shape)
    title = escape(f"{outcome.family} {outcome.dtype} {shape} on {outcome.device_name}: {rounds} rounds")
    table = Table(title=title)
    columns = ("regime", "entry", "median ms", "x first", "95% interval", "wins", "J/call", "MHz", "W", "verdict")
    for column in columns:
        table.add_column(column, overflow="fold")
    colour = {FASTER: "green", SLOWER: "red"}
    for s in (s for s in outcome.summaries if s.shape == shape):
        interval = f"{s.speedup.low:.3f}-{s.speedup.high:.3f}" if s.verdict != "baseline" else ""
        joules = "n/a" if math.isnan(s.joules_per_call) else fmt(s.joules_per_call)
        mhz, watts = ("n/a" if math.isnan(value) else f"{value:.0f}" for value in (s.sm_clock_mhz, s.power_w))
        verdict = f"[{colour[s.verdict]}]{s.verdict}[/]" if s.verdict in colour else s.verdict
        table.add_row(
            s.regime,
            escape(s.entry),
            fmt(s.median_ms),
            f"{s.speedup.estimate:.3f}",
            interval,
            f"{s.wins}/{s.rounds}",
            joules,
            mhz,
            watts,
            verdict,
        )
    return table


def _write_csv(path: Path, outcome, confidence: float) -> None:
    import csv

    from rooflint.analysis.ab_stats import CSV_COLUMNS, csv_rows
    from rooflint.core.errors import UserError
    from rooflint.core.paths import replacing, why_not

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(path, newline="") as handle:  # whole or not at all: stopped midway, the old table stays
            writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            writer.writerows(csv_rows(outcome.summaries, confidence))
    except OSError as error:
        raise UserError(f"cannot write --csv file {path}: {why_not(path, error)}") from None
