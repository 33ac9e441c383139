"""`rooflint lint RESULTS`: check every row of a results file against the roofline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from rooflint.cli.console import console, user_errors
from rooflint.cli.options import RoofOption, SpecFileOption, named_gpu

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


@user_errors
def lint_command(
    results: Annotated[Path, typer.Argument(help="results.csv/.json from bench, or a plain CSV (docs/lint.md).")],
    gpu: Annotated[
        str | None,
        typer.Option("--gpu", help="Judge every row against this GPU (default: each row's own).", callback=named_gpu),
    ] = None,
    spec_file: SpecFileOption = None,
    roof: RoofOption = None,
    counters: Annotated[
        Path | None,
        typer.Option("--counters", help="CSV from `rooflint profile --ncu`: enables the bytes-disagree rule."),
    ] = None,
) -> None:
    """Find numbers that cannot be true: above the roof, throttled, cache-resident, launch-bound, noisy, wrong GPU.

    Prints each finding with its severity and a one-line explanation; exits 1 when any is an error.

    Examples:
      rooflint lint rooflint-out/results.csv
      rooflint lint published.csv --gpu h100_sxm
      rooflint lint out/results.csv --counters out/profile/ncu.csv --roof measured
    """
    from rich.table import Table

    from rooflint.analysis.lint import SEVERITY_ORDER, Severity, lint_file
    from rooflint.core.roofs import DEFAULT_ROOF

    roof = roof or DEFAULT_ROOF
    linted = lint_file(results, gpu=gpu, spec_file=spec_file, roof=roof, counters=counters)
    findings = [f for _, row_findings in linted for f in row_findings]
    findings.sort(key=lambda f: SEVERITY_ORDER[f.severity])
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITY_ORDER}
    summary = (
        f"{len(linted)} rows: {counts[Severity.ERROR]} errors, {counts[Severity.WARNING]} warnings, "
        f"{counts[Severity.INFO]} info"
    )
    # The ceilings the rows were judged against, as lint_file used them: --roof's for a GPU the table
    # knows, the measured ones a CPU row (or a GPU outside the table) recorded for its own.
    ceilings = linted.ceilings_note()
    roof_note = f"judged against {'--gpu ' + gpu if gpu else 'each row' + chr(39) + 's GPU'}"
    roof_note += f", {ceilings}" if ceilings else ""
    if not findings:
        console.print(f"[green]clean[/]: {summary} ({escape(roof_note)})")
        return
    # Escaped: the path and each row's names come from the user and the file, and rich read a
    # `[/]` in them as markup (a traceback) and a `[bold]` as a style, dropping it from the text.
    table = Table(title=escape(f"rooflint lint: {results} ({roof_note})"), show_lines=False)
    for column in ("row", "severity", "rule", "explanation"):
        table.add_column(column, overflow="fold")
    for finding in findings:
        style = SEVERITY_STYLE[finding.severity]
        table.add_row(escape(finding.row), f"[{style}]{finding.severity}[/]", finding.rule, escape(finding.message))
    console.print(table)
    console.print(summary)
    if counts[Severity.ERROR]:
        raise typer.Exit(1)
