"""Shared pieces for CLI commands: the consoles and the user-error wrapper."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from rooflint.core.errors import UserError

# Off a terminal (CI logs, pipes) rich would wrap tables at 80 columns; logs can be wide.
console = Console()
if not console.is_terminal:
    console = Console(width=200)
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print one clear error line and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def print_written(paths, to: Console | None = None) -> None:
    """The files a command wrote, on one line. Paths are text, never rich markup: "[/x]" in a folder's
    name raised after the files were written (exit 1), and "[bold]" vanished from the path shown."""
    (to or console).print(escape("wrote " + ", ".join(str(p) for p in paths)), highlight=False, soft_wrap=True)


def failing_rows(frame) -> str:
    """'' where every row of the merged results passed or was skipped (a row re-run since counts as
    re-run); else how many failed, errored, ran out of memory or crashed, by status, and the first few
    by name."""
    from collections import Counter

    from rooflint.core.fmt import counted
    from rooflint.outputs.results import not_passed

    failing = not_passed(frame)
    if not failing:
        return ""
    names = [name for name, _ in failing]
    statuses = Counter(status for _, status in failing)
    counts = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
    shown = "; ".join(names[:3]) + (f"; and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{counted(len(names), 'row')} did not pass ({counts}): {shown}"


def exit_if_rows_failed(frame) -> None:
    """A crash is a failure in every command that reads it: after a command wrote everything it was
    asked for (a report, a merged file), a row that did not pass is named and the exit is 1, as
    bench's and lint's are (a `merge && publish` step passed rows that report and compare fail)."""
    failing = failing_rows(frame)
    if failing:
        err_console.print(f"[bold red]failing[/]: {escape(failing)}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def user_errors(command: F) -> F:
    """Wrap a command so bad input is one red line and exit code 2, also under CliRunner; a Ctrl-C
    (or SIGTERM) the command does not handle itself says so and exits 130."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except UserError as error:
            raise fail(str(error)) from None
        except KeyboardInterrupt:
            # typer turns it into a bare exit 130 before the entry point's handler sees it: the run
            # stopped without a word, as if it had printed all it meant to
            err_console.print("[yellow]interrupted[/]: stopped before it finished (Ctrl-C or SIGTERM)")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]
