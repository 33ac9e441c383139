"""Shared pieces for CLI commands: consoles, the user-error wrapper and output directories."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer
from rich.console import Console

from rooflint.errors import UserError

# Off a terminal (CI logs, pipes) rich would wrap tables at 80 columns; logs can be wide.
console = Console()
if not console.is_terminal:
    console = Console(width=200)
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print one clear error line and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def user_errors(command: F) -> F:
    """Wrap a command so bad input is one red line and exit code 2, also under CliRunner."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except UserError as error:
            raise fail(str(error)) from None

    return wrapper  # type: ignore[return-value]


def output_dir(path: Path) -> Path:
    """Create an output directory and prove it is writable, or fail with one line."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".rooflint-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise UserError(f"cannot write to output directory {path}: {error.strerror or error}") from None
    return path


def write_text(path: Path, text: str, what: str = "file") -> None:
    """Write a text output, creating its directory, or fail with one line naming it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as error:
        raise UserError(f"cannot write {what} {path}: {error.strerror or error}") from None
