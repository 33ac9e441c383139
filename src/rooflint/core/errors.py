"""Errors that reach the user as one clear line, never as a traceback."""


class UserError(Exception):
    """Bad input: the message says what was wrong and what is valid."""


class VariantSkipped(Exception):
    """A variant cannot run here (no GPU, no nvcc, a build error); the run goes on."""


def describe(error: BaseException) -> str:
    """An error in one line for a row's message: its type and its message's first line (its type
    alone where it has no message)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def describe_import(error: BaseException) -> str:
    """describe() for an error raised while importing a user's module: a SystemExit there is a module
    that calls sys.exit() (or parses arguments) at import, which would otherwise end rooflint with
    its own exit code and no word (0 for a bare sys.exit(): a run passing with nothing run)."""
    if isinstance(error, SystemExit):
        return f"SystemExit: it exits at import (sys.exit({error.code!r}))"
    return describe(error)
