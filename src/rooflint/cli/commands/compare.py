"""`rooflint compare BASE NEW`: the CI gate. Exit 0 pass, 1 regression, 2 bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rooflint.cli.console import err_console, user_errors
from rooflint.cli.options import path_option


@user_errors
def compare_command(
    base: Annotated[Path, typer.Argument(help="Baseline results (.csv or .json), e.g. reports/h100/results.csv.")],
    new: Annotated[Path, typer.Argument(help="New results to judge, e.g. out/results.csv.")],
    threshold: Annotated[
        str, typer.Option("--threshold", help="Median-time change that counts, in percent (5% or 5).")
    ] = "5%",
    allow_gpu_mismatch: Annotated[
        bool, typer.Option("--allow-gpu-mismatch", help="Compare runs from different GPUs (one GPU each side).")
    ] = False,
    fail_on_missing: Annotated[
        bool,
        typer.Option("--fail-on-missing", help="Also exit 1 when a BASE row of a family NEW did not run is missing."),
    ] = False,
    out: Annotated[
        Path | None,
        path_option(
            "--out",
            "Also write the Markdown diff to this file.",
            "name the Markdown file to write, or leave it out",
            file=True,
        ),
    ] = None,
) -> None:
    """Compare two results files and fail (exit 1) on a regression past the threshold.

    Rows are joined on family, variant, dtype, shape and GPU. A row is slower (a regression) when its
    median time grew by more than the threshold AND the two runs' p20-p80 intervals do not overlap;
    past the threshold with overlapping intervals it is "noisy" and does not fail. A variant that was
    ok in BASE and fails, errors, skips or crashes in NEW is a regression, and so is one missing from
    NEW where NEW ran its family on that GPU. A variant failing in both runs ("still failing") fails
    the comparison too. Rows of families NEW did not run are listed.

    Examples:
      rooflint compare reports/h100/results.csv out/results.csv
      rooflint compare base.csv new.csv --threshold 3% --out diff.md
    """
    from rooflint.analysis.compare import compare_frames, parse_threshold
    from rooflint.core.paths import write_text
    from rooflint.outputs.result_file import refuse_reading_and_writing
    from rooflint.outputs.results import read_results

    fraction = parse_threshold(threshold)
    if "%" not in threshold and fraction < 0.01:
        # "0.03" is a share written as a fraction more often than a 0.03% threshold: say how it reads.
        err_console.print(
            f"note: --threshold {threshold} reads as {fraction * 100:g}%; for {fraction * 1e4:g}% write "
            f"{fraction * 1e4:g} or {fraction * 1e4:g}%",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    if out is not None:
        refuse_reading_and_writing(out, [base, new])
    result = compare_frames(
        read_results(base),
        read_results(new),
        fraction,
        allow_gpu_mismatch,
        base_name=str(base),
        new_name=str(new),
        fail_on_missing=fail_on_missing,
    )
    text = result.to_markdown()
    if out is not None:
        write_text(out, text, "comparison")
    typer.echo(text, nl=False)
    if result.failed:
        raise typer.Exit(1)
