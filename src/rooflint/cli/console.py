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
