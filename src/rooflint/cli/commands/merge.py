"""`rooflint merge A B ... --out merged.csv`: one table from several machines and GPUs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from rooflint.cli.console import err_console, exit_if_rows_failed, user_errors
from rooflint.cli.options import path_option


@user_errors
def merge_command(
    results: Annotated[list[Path], typer.Argument(help="Results files (.csv or .json) to combine.")],
    out: Annotated[
        Path,
        path_option(
            "--out",
            "Merged file; .json writes JSON, anything else CSV.",
            "name the merged file (.csv or .json)",
            file=True,
        ),
    ] = Path("merged.csv"),
) -> None:
    """Combine results from several machines or GPUs into one file.

    Rows with the same family, variant, dtype, shape and GPU are kept once: the newest timestamp
    wins (on a tie, the file named later), and the number dropped is printed. A GPU name rooflint
    knows (h100, a device name) is written as its key (h100_sxm); others stay as written. The merged
    file is written whole; exit 1 where a row in it failed, errored, ran out of memory or crashed.

    Example: rooflint merge h100/results.csv a100/results.csv --out merged.csv
    """
    from rooflint.core.errors import UserError
    from rooflint.outputs.merge import merge_files, write_frame
    from rooflint.outputs.result_file import refuse_reading_and_writing

    # Merged over an input, that file's older duplicates (and a results.json's run record) would be gone.
    refuse_reading_and_writing(out, results)
    merged = merge_files(results)
    if merged.frame.empty:
        # Header-only files (runs killed before their first row) merged to a header-only file with
        # exit 0, over any --out there was: every command that reads it refuses it as holding no rows.
        raise UserError(f"no result rows in {', '.join(str(p) for p in results)}; merge results files that hold rows")
    write_frame(merged.frame, out)
    # Escaped: GPU names from the files and the path are text, not rich markup (a `[/]` was a traceback).
    err_console.print(escape(f"{merged.describe()} -> {out}"), highlight=False, soft_wrap=True)
    exit_if_rows_failed(merged.frame)  # the file is written whole first
