"""The rooflint Typer app: one module per command under rooflint.cli.commands.

Command modules import only Typer and rooflint's light option types at the top; the engine, torch,
pandas and matplotlib load inside the command that needs them, so `rooflint --version` and
`rooflint --help` start in a fraction of a second.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import signal
import sys
from collections.abc import Iterator
from typing import Annotated

import typer

from rooflint import __version__
from rooflint.cli.commands import (
    ab,
    bench,
    ceilings,
    compare,
    doctor,
    lint,
    listing,
    merge,
    model,
    new_family,
    profile,
    report,
    roofline,
    specs,
)
from rooflint.cli.console import console, err_console, escape
from rooflint.core.errors import UserError
from rooflint.core.switches import check_switches
from rooflint.engine.compile_caches import pin_triton_cache_dir

app = typer.Typer(
    name="rooflint",
    help="Roofline benchmarking and linting for GPU kernels: how close each implementation is to the "
    "GPU's limits, why it falls short, and whether a change made it slower.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

# (name, function) in the order `rooflint --help` lists them: measure, then analyse, then set up.
COMMANDS = (
    ("bench", bench.bench_command),
    ("ab", ab.ab_command),
    ("list", listing.list_command),
    ("specs", specs.specs_command),
    ("roofline", roofline.roofline_command),
    ("lint", lint.lint_command),
    ("compare", compare.compare_command),
    ("merge", merge.merge_command),
    ("report", report.report_command),
    ("ceilings", ceilings.ceilings_command),
    ("profile", profile.profile_command),
    ("model", model.model_command),
    ("doctor", doctor.doctor_command),
    ("new-family", new_family.new_family_command),
)


def help_text(docstring: str | None) -> str:
    """A command's docstring as its --help text: each paragraph's wrapped source lines joined, so the
    terminal wraps them at its own width (Typer's rich mode keeps every newline, leaving ragged lines
    at any width but the source's). Indented lines (examples) and bullets keep their own lines."""
    paragraphs = []
    for paragraph in inspect.cleandoc(docstring or "").split("\n\n"):
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and not line.startswith((" ", "- ")) and not lines[-1].startswith(" "):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


for _name, _function in COMMANDS:
    app.command(_name, help=help_text(_function.__doc__))(_function)


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


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (kill, a CI job's timeout, a scheduler's preemption) stops a command as Ctrl-C does: the
    rows measured so far stay on disk beside results.json and the measuring worker is stopped. Its
    default action would end this process at once, without results.json, its worker left running."""

    def interrupt(signum, frame) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.getsignal(signal.SIGTERM)
        if previous is signal.SIG_DFL:  # one the caller ignores or handles stays theirs
            signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (rooflint embedded in another program): as it was
        previous = None
    try:
        yield
    finally:
        if previous is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, previous)


def _first_word(args: list[str]) -> str:
    """The first argument that is not an option: the command's name where one was given."""
    return next((arg for arg in args if not arg.startswith("-")), "")


def _command_named_in(args: list[str]) -> str:
    """``rooflint <command>`` for the first argument that names a command, else ""."""
    names = {command.name or command.callback.__name__ for command in app.registered_commands}
    word = _first_word(args)
    return f"rooflint {word}" if word in names else ""


def _refuse_repeated_options(args: list[str]) -> None:
    """An option that takes one value, given twice (`--dtype bf16 --dtype fp32`), would silently run
    the last one: refused in one line. Options that take several (`--variants`, bench's `--dtype`)
    and flags may repeat."""
    words = [arg.split("=", 1)[0] for arg in (args[: args.index("--")] if "--" in args else args)]
    named = [word for word in words if word.startswith("-")]
    if len(named) == len(set(named)):  # the usual case decides without building the command
        return
    command = getattr(typer.main.get_command(app), "commands", {}).get(_first_word(words))
    if command is None:
        return
    for param in command.params:
        # typer's own click (bundled since typer 0.29) has its own Option class: read the shape
        if getattr(param, "param_type_name", "") != "option" or param.multiple or param.is_flag or param.count:
            continue
        given = [index for index, word in enumerate(words) if word in param.opts or word in param.secondary_opts]
        if len(given) > 1:
            values = [
                args[i].split("=", 1)[1] if "=" in args[i] else (args[i + 1] if i + 1 < len(args) else "")
                for i in given
            ]
            raise UserError(f"{param.opts[0]} is given {len(given)} times ({', '.join(values)}); give it once")


def main() -> None:
    """Console entry point: user errors become one line on stderr and exit code 2, never a traceback."""
    try:
        check_switches()
        pin_triton_cache_dir()
        _refuse_repeated_options(sys.argv[1:])
        with _sigterm_interrupts():
            code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except UserError as error:
        err_console.print(f"[bold red]error:[/] {escape(str(error))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]: rows measured so far are on disk")
        sys.exit(130)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except typer.Abort:
        sys.exit(1)
    except Exception as error:  # noqa: BLE001 - the last line of defence: never a traceback for the user
        # Usage errors come from the click that typer uses (its own bundled copy since typer 0.29, the
        # click package before): recognise them by shape, so rooflint imports no click of its own.
        show, code = getattr(error, "show", None), getattr(error, "exit_code", None)
        if isinstance(code, int) and type(error).__name__ == "NoArgsIsHelpError":
            # A bare `rooflint`: the help is the answer (rich has printed it already, leaving the
            # message empty), not an "error:" line with nothing in it.
            message = error.format_message() if hasattr(error, "format_message") else ""
            if message.strip():
                typer.echo(message)
            sys.exit(code)
        if isinstance(code, int) and callable(show):
            # click prints Usage, Try and Error on three lines; one line says it all and where to look.
            message = error.format_message() if hasattr(error, "format_message") else str(error)
            context = getattr(error, "ctx", None)
            where = getattr(context, "command_path", "") or "rooflint"
            if where == "rooflint":  # an option's missing value is raised with no command's context
                where = _command_named_in(sys.argv[1:]) or where
            err_console.print(
                f"[bold red]error:[/] {escape(' '.join(message.split()))} (see {escape(where)} --help)",
                highlight=False,
                soft_wrap=True,
            )
            sys.exit(code)
        if isinstance(code, int):
            sys.exit(code)
        if os.environ.get("ROOFLINT_DEBUG", "").strip() not in ("", "0"):  # a malformed value was refused at start
            raise
        # The message is the exception's own text (a kernel's, a library's): escaped, as rich would read
        # "[/x]" in it as a closing tag and raise here, a traceback after all.
        why = escape(f"{type(error).__name__}: {error}")
        err_console.print(
            f"[bold red]error:[/] {why} (set ROOFLINT_DEBUG=1 for the traceback)",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(1)
