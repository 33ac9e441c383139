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
