"""`rooflint report RESULTS...`: Markdown for CI summaries, self-contained HTML, or versioned JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rooflint.cli.console import err_console, exit_if_rows_failed, print_written, user_errors
from rooflint.cli.options import SpecFileOption, path_option


@user_errors
def report_command(
    results: Annotated[list[Path], typer.Argument(help="Results files (.csv or .json); several are merged.")],
    fmt: Annotated[str, typer.Option("--format", help="md, html or json.")] = "md",
    out: Annotated[
        Path | None,
        path_option(
            "--out",
            "Report file; rooflines are drawn beside it. Default: stdout.",
            "name the report file, or leave it out for stdout",
            file=True,
        ),
    ] = None,
    spec_file: SpecFileOption = None,
    counters: Annotated[
        list[Path] | None,
        typer.Option(
            "--counters",
            help="CSV from `rooflint profile --ncu` (repeat for several): the HTML roofline links each "
            "row's analytic point to its ncu-measured one.",
        ),
    ] = None,
) -> None:
    """Render results as a report: per GPU one roofline, per family a table of its variants.

    Markdown (md) suits a CI job summary or a pull-request comment: it links the roofline PNG and also
    draws the roofline as text, since GitHub strips embedded images. html is one self-contained file
    with the images embedded and sortable tables. json follows the schema "rooflint.report/1".
    Results from several GPUs get a table across GPUs and one roofline per GPU. The HTML roofline is
    interactive (tooltips, filters) and has an energy roofline beside it where NVML measured energy.

    Examples:
      rooflint report out/results.csv --format md >> "$GITHUB_STEP_SUMMARY"
      rooflint report h100.csv a100.csv --format html --out report/index.html
      rooflint report out/results.csv --counters out/profile/ncu.csv --format html --out report/index.html
    """
    from rooflint.analysis.lint_input import read_counters
    from rooflint.core.paths import probe_writable_file
    from rooflint.outputs.merge import merge_files
    from rooflint.outputs.report import check_format, refuse_image_name, write_report
    from rooflint.outputs.result_file import refuse_reading_and_writing

    check_format(fmt)  # first: a flag refused after the probes below would leave their folders
    if out is not None:
        refuse_reading_and_writing(out, [*results, *(counters or [])])
        refuse_image_name(out)
        # One line, before any work, where the report cannot be written: its folder (judged by the
        # nearest one that exists, none created, so input refused after this leaves no empty folder),
        # or a folder given as --out, found before only when the report was written, after the
        # rooflines had been drawn over those in the folder above it.
        probe_writable_file(out, "report")
    measured: dict[tuple[str, str, str, str], float] = {}
    for path in counters or []:
        measured.update(read_counters(path))
    merged = merge_files(results, spec_file)  # read once: for the report, and for the rows that did not pass
    text = write_report(results, fmt, out, spec_file, counters=measured if counters else None, merged=merged)
    if out is None:
        typer.echo(text, nl=False)
    else:
        print_written([out], err_console)
    exit_if_rows_failed(merged.frame)  # the report shows the rows; its exit status says so
