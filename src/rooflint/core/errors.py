"""Errors that reach the user as one clear line, never as a traceback."""


class UserError(Exception):
    """Bad input: the message says what was wrong and what is valid."""


class VariantSkipped(Exception):
    """A variant cannot run here (no GPU, no nvcc, a build error); the run goes on."""
