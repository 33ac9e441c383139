"""The rooflint command line: list, specs, bench and roofline here; the rest in rooflint.commands."""

from __future__ import annotations

import importlib
import sys
from typing import Annotated

import typer

from rooflint import __version__
from rooflint.cli_support import console, err_console
from rooflint.errors import UserError

app = typer.Typer(
    name="rooflint",
    help="Roofline benchmarking and linting for GPU kernels: how close each implementation is to the "
    "GPU's limits, why it falls short, and whether a change made it slower.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

# Modules under rooflint/commands/ that each define register(app). Wrap each command function with
# rooflint.cli_support.user_errors so bad input is one line and exit 2, under CliRunner too.
COMMAND_MODULES: tuple[str, ...] = ("report", "compare", "merge", "lint", "ceilings", "profile")


def _version(value: bool) -> None:
    if value:
        console.print(f"rooflint {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool | None, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = None,
) -> None:
    """rooflint: roofline benchmarks, profiles and lint for GPU kernels."""


def _register_commands() -> None:
    from rooflint import commands_core

    commands_core.register(app)
    for name in COMMAND_MODULES:
        importlib.import_module(f"rooflint.commands.{name}").register(app)


_register_commands()


def main() -> None:
    """Console entry point: user errors become one line on stderr and exit code 2, never a traceback."""
    try:
        # With standalone_mode=False click returns typer.Exit's code instead of exiting: pass it on.
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except UserError as error:
        err_console.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]: rows measured so far are on disk")
        sys.exit(130)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except typer.Abort:
        sys.exit(1)
    except Exception as error:  # click's usage errors and anything else: one line, no traceback
        import click

        if isinstance(error, click.exceptions.ClickException):
            error.show()
            sys.exit(error.exit_code)
        if isinstance(error, click.exceptions.Exit):
            sys.exit(error.exit_code)
        err_console.print(f"[bold red]error:[/] {type(error).__name__}: {error}", highlight=False, soft_wrap=True)
        sys.exit(1)
