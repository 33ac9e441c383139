"""The on/off switches rooflint reads from the environment: each "0" or "1", or unset for its default;
and the few settings that take one of several words (CHOICES).

Read in one place so that a value that is neither ("yes", "false", "on") is refused in one line when a
command starts, instead of quietly meaning the default deep inside a kernel's launch, where the run
then measured something other than what was asked for.
"""

from __future__ import annotations

import os

from rooflint.core.errors import UserError

# name -> what 1 and 0 do (the refusal names the valid values; the docs say the rest)
SWITCHES = {
    "ROOFLINT_PDL": "1: PDL on every kernel that supports it; 0: on none; unset: in a model's decode step",
    "ROOFLINT_RING": "1: decode GEMMs on the bulk-copy ring kernel wherever it fits; 0: nowhere; unset: the large ones",
    "ROOFLINT_PERSISTENT": "1: a decode step's layers as one persistent kernel; 0 or unset: a kernel per op",
    "ROOFLINT_AUTOTUNE_PICKS": "1 or unset: Triton autotune picks kept on disk; 0: every process times them",
    "ROOFLINT_CPU_CEILINGS_CACHE": "1 or unset: a CPU run reuses this host's ceilings of the last 10 min; 0: measures",
    "ROOFLINT_DEBUG": "1: a traceback instead of the one-line error; 0 or unset: the one line",
}


# name -> (the valid values, what they do)
CHOICES = {
    "ROOFLINT_NORM_IN_GEMM": (("0", "attn", "mlp", "both"), "the RMSNorms a Llama decode step folds into the GEMMs "
                              "after them: attn, mlp or both; 0 or unset: none"),
}  # fmt: skip


def switch(name: str) -> bool | None:
    """True for "1", False for "0", None where unset or empty; anything else is refused."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    if value in ("0", "1"):
        return value == "1"
    raise UserError(f"{name}={value!r} is not a switch; valid: 0 or 1, or unset ({SWITCHES.get(name, '')})")


def choice(name: str) -> str | None:
    """One of CHOICES[name]'s values (lower case), None where unset or empty; anything else is refused."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return None
    valid, what = CHOICES[name]
    if value not in valid:
        raise UserError(f"{name}={value!r} is not valid; valid: {', '.join(valid)}, or unset ({what})")
    return value


def check_switches() -> None:
    """Refuse a malformed switch or choice before a command does anything."""
    for name in SWITCHES:
        switch(name)
    for name in CHOICES:
        choice(name)
