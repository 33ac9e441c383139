"""Meta-parameter sets for `rooflint ab --config`, and the protocol a variant follows to take one.

The protocol: a variant is configurable when its builder has a keyword parameter ``config`` whose
default is a mapping naming every meta-parameter it accepts, each with its default value (None: the
builder picks it from the shape, as it does without a config). ab calls
``builder(case, config={**defaults, **overrides})``; a plain bench calls ``builder(case)`` and so
gets the defaults, unchanged. The names are the kernel's own: its ``tl.constexpr`` arguments
(BLOCK_R) and Triton's launch options (num_warps, num_stages). softmax's ``triton`` variant is one.
"""

from __future__ import annotations

import inspect
import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rooflint.core.errors import UserError

CONFIG_PARAMETER = "config"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
EXAMPLE = "BLOCK_M=64,128"


def parse_configs(texts: Sequence[str]) -> list[dict[str, int]]:
    """``["BLOCK_M=64,128", "num_warps=4,8"]`` -> the cross product, in order: BLOCK_M=64 with
    num_warps=4, then 8, then BLOCK_M=128 with each. No text gives [] (no configs)."""
    names, choices = [], []
    for text in texts:
        name, equals, values = text.partition("=")
        name = name.strip()
        if not equals or not _NAME.fullmatch(name) or not values.strip():
            raise UserError(f"malformed --config {text!r}: write NAME=VALUE[,VALUE...], e.g. {EXAMPLE}")
        if name in names:
            raise UserError(f"--config names {name} twice; give its values once, comma-separated: {name}=a,b")
        parsed = []
        for value in values.split(","):
            try:
                parsed.append(int(value.strip()))
            except ValueError:
                raise UserError(f"--config {name}={value.strip()!r} is not an integer, e.g. {EXAMPLE}") from None
        names.append(name)
        choices.append(list(dict.fromkeys(parsed)))  # a value given twice is one config, not two
    return [dict(zip(names, values)) for values in itertools.product(*choices)] if names else []


def config_defaults(build: Any) -> Mapping[str, Any] | None:
    """The meta-parameters a variant's builder accepts, with their defaults; None when it takes no
    config (see the module's docstring)."""
    try:
        parameter = inspect.signature(build).parameters.get(CONFIG_PARAMETER)
    except (TypeError, ValueError):
        return None
    if parameter is None or not isinstance(parameter.default, Mapping):
        return None
    return parameter.default


def checked_config(family: str, variant: str, build: Any, overrides: Mapping[str, int]) -> dict[str, Any]:
    """The config ab hands the builder: its defaults with ``overrides`` laid over; a UserError when
    the variant takes no config or lacks one of the names."""
    defaults = config_defaults(build)
    if defaults is None:
        raise UserError(
            f"variant {variant} of {family} takes no --config: its builder has no `{CONFIG_PARAMETER}` "
            "parameter (docs/ab.md says how a variant takes one)"
        )
    unknown = [name for name in overrides if name not in defaults]
    if unknown:
        raise UserError(
            f"variant {variant} of {family} has no meta-parameter {unknown[0]}; valid: {', '.join(defaults)}"
        )
    return {**defaults, **overrides}


def config_label(config: Mapping[str, int]) -> str:
    return ",".join(f"{name}={value}" for name, value in config.items())
