"""`rooflint roofline`: a GPU's roofline, measured, projected or predicted."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from rooflint.cli.console import err_console, print_written, user_errors
from rooflint.cli.options import SpecFileOption, named_gpu, path_option
from rooflint.core.fmt import counted


@user_errors
def roofline_command(
    results: Annotated[Path | None, typer.Argument(help="results.csv or .json from bench; optional.")] = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu",
            help="GPU whose ceilings to draw (t4, h100, ...). Default: each GPU the results were measured on, "
            "on its own roof; h100_sxm without results.",
            callback=named_gpu,
        ),
    ] = None,
    out: Annotated[
        Path,
        path_option(
            "--out",
            "Directory for roofline.png/.svg/.csv.",
            "name the folder for roofline.png/.svg/.csv (default: rooflint-out)",
        ),
    ] = Path("rooflint-out"),
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

    Without --gpu, each GPU in the results gets its own roofline, its rows on its own roof. Files
    are named as bench names them: roofline.png/.svg/.csv for one GPU, roofline-<gpu>.* for each
    of several. Measured ceilings (from `rooflint ceilings`, in the cache or --ceilings DIR) are
    drawn dashed beside the datasheet ones.

    Examples:
      rooflint roofline --gpu t4
      rooflint roofline reports/h100/results.csv --gpu a100_80gb_sxm
      rooflint roofline reports/h100/results.csv --gpu h100 --ceilings reports/ceilings
    """
    from rooflint.analysis.projection import measured_groups, points_for_roofline
    from rooflint.core.errors import UserError
    from rooflint.core.paths import output_dir, probe_output_dir
    from rooflint.core.roofs import measured_overlay
    from rooflint.core.specs import get_spec, load_spec_file
    from rooflint.outputs.merge import dedupe, dropped_note
    from rooflint.outputs.points import points_from_results
    from rooflint.outputs.results import read_results

    if spec_file is not None:
        load_spec_file(spec_file)  # refused up front, whether or not a row would need it
    if ceilings is not None and not ceilings.is_dir():
        # A mistyped folder, or the .toml itself, must not quietly draw no measured ceilings.
        what = "is a file" if ceilings.exists() else "does not exist"
        raise UserError(
            f"--ceilings {ceilings} {what}; give the folder `rooflint ceilings --out` wrote <gpu>.toml into"
        )
    # Proved writable before any work, and created only once the results and --gpu have passed:
    # input refused here (a missing file, an unknown GPU, no row timed) must leave no empty folder.
    probe_output_dir(out)
    frame = None
    if results is not None:
        # Deduped as report, compare and merge read it: a key measured twice (a re-run appended, a
        # crash after an ok row) drew its stale row as well, or its one point twice.
        frame, duplicates = dedupe(read_results(results))
        if duplicates:
            err_console.print(escape(f"note: {dropped_note(len(duplicates))}"), highlight=False)
    if gpu or frame is None:
        # One roof: rows measured on it, else projected from other GPUs' rows or predicted.
        spec = get_spec(gpu or "h100_sxm", spec_file)
        plots = [(spec, *points_for_roofline(spec, frame))]
        missing = plots[0][1].attrs.get("not_predicted", [])
        if missing:
            # Each needs a peak the spec lacks (a spec file with only some of them): said, not dropped unseen.
            note = f"note: no point for {', '.join(missing)}: {spec.key}'s spec has no peak their cost models need"
            err_console.print(escape(note), highlight=False, soft_wrap=True)
    else:
        # Each GPU's own rows on its own roof, whatever name its gpu column spells it by.
        plots = [
            (spec, points_from_results(rows), f"{spec.name}: measured")
            for spec, rows in measured_groups(frame, spec_file)
        ]
        if not plots:
            raise UserError(f"{results}: no row was timed, so there is no GPU to draw; pass --gpu to predict points")
    # matplotlib (0.4 s of imports) once every input has passed: a refused one is answered without it
    from rooflint.outputs.plot import plot_roofline, roofline_base

    output_dir(out)
    written = []
    for spec, points, title in plots:
        base = roofline_base(out, spec.key, several=len(plots) > 1)
        overlay = measured_overlay(spec, ceilings)
        if ceilings is not None and not overlay and spec.origin != "measured":
            note = f"note: {ceilings} holds no {spec.key}.toml; no measured ceilings drawn"
            err_console.print(escape(note), highlight=False)
        written += plot_roofline(points, spec, base, title, overlay)
    print_written(written)
    if frame is not None and _say_what_failed(frame):
        raise typer.Exit(1)  # a crash is a failure in every command that reads it


def _say_what_failed(frame) -> bool:
    """A row that failed its check, errored, ran out of memory or crashed has no point to draw; name
    it, so a broken variant does not just vanish from the plot (skipped rows are no failure). Whether
    there was one."""
    from rooflint.outputs.results import not_passed

    names = [f"{name}: {status}" for name, status in not_passed(frame)]
    if not names:
        return False
    err_console.print(
        f"[bold red]not drawn[/]: {counted(len(names), 'row')} that did not pass: " + escape("; ".join(names)),
        highlight=False,
        soft_wrap=True,
    )
    return True
