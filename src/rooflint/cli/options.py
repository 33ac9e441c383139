"""Options shared by several commands, declared once (Typer's ``Annotated`` style).

Defaults for what these options mean (which device, which roof, which size) belong to the engine;
here ``None`` means "let the engine decide".
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from rooflint.core.errors import UserError


def _not_empty(option: str, what_instead: str) -> Callable[[str | None], str | None]:
    """An option callback refusing an empty value (an unset shell variable: --gpu "$GPU"): taken as
    the option left out, it would silently run the default the caller did not mean."""

    def check(value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise UserError(f"{option} is empty; {what_instead}")
        return value

    return check


def path_not_empty(option: str, what_instead: str, file: bool = False) -> Callable[[str], Path]:
    """_not_empty for a path option, as its parser (every command's --out, --json, --weights,
    --spec-file, --junit): a callback sees the value after it became a Path, where "" is already
    Path("."), the current folder, read as that folder (or its files) without a word. With ``file``
    (an option naming a file to write), a value ending in a path separator is refused too: Path
    drops the separator, and `--out report/` was written as a file named `report`, its rooflines
    drawn into the folder above."""
    check = _not_empty(option, what_instead)

    def parse(value: str | Path) -> Path:
        if isinstance(value, Path):  # the option's default, never empty
            return value
        check(value)
        if file and value.endswith(tuple(filter(None, (os.sep, os.altsep)))):
            raise UserError(f"{option} {value} ends in {value[-1]}, so it names a folder; {what_instead}")
        return Path(value)

    return parse


def path_option(name: str, help: str, what_instead: str, file: bool = False) -> Any:
    """A path option (--out, --json, --weights, --junit) declared once: its empty value refused in one
    line (path_not_empty: ``what_instead`` says what is valid), labelled <path> as typer labels a Path
    option (a parser's type would show as <Path>). ``file``: the option names a file to write, never a
    folder."""
    return typer.Option(name, help=help, parser=path_not_empty(name, what_instead, file), metavar="<path>")


# an empty --gpu would judge against another GPU than the caller meant, or skip the wrong-GPU check
named_gpu = _not_empty("--gpu", "name a GPU (h100_sxm, t4, ...: `rooflint specs` lists them) or leave it out")
# an empty --roof would judge against the datasheet where the caller asked for measured ceilings
named_roof = _not_empty("--roof", "valid: datasheet, measured (or leave it out for the datasheet)")
# an empty --size ran the default size (large on a GPU, small on a CPU) in bench and ab, exit 0
named_size = _not_empty(
    "--size", "valid: small, large or key=value,... (or leave it out: large on a GPU, small on a CPU)"
)


GpuOption = Annotated[
    str | None,
    typer.Option(
        "--gpu", help="GPU spec to judge against (h100_sxm, t4, ...); default: the one here.", callback=named_gpu
    ),
]
SpecFileOption = Annotated[
    Path | None,
    # empty, it was refused as "spec file . does not exist", a file the caller never named
    path_option(
        "--spec-file",
        "TOML describing GPUs the table lacks (format: hardware_specs/gpus.toml).",
        "name a TOML file of GPUs (format: hardware_specs/gpus.toml) or leave it out",
    ),
]
DeviceOption = Annotated[str | None, typer.Option("--device", help="cuda or cpu (default: cuda if present).")]


RoofOption = Annotated[
    str | None,
    typer.Option(
        "--roof",
        help="Judge % of roof against 'datasheet' ceilings or 'measured' ones (rooflint ceilings).",
        callback=named_roof,
    ),
]
VariantsOption = Annotated[
    list[str] | None, typer.Option("--variants", "-V", help="Variant names or kinds (repeat or comma-separate).")
]
SizeOption = Annotated[
    str | None,
    typer.Option(
        "--size", help="small, large, or key=value,... (default: large on a GPU, small on CPU).", callback=named_size
    ),
]

# One flag, not a --x/--no-x pair: the pair's second name column squeezes every option name in
# an 80-column --help.
NoReferenceCacheOption = Annotated[
    bool,
    typer.Option(
        "--no-reference-cache",
        help="Compute every float64 reference; by default the slow ones are kept in the user cache "
        "(ROOFLINT_CACHE) and read back on later runs.",
    ),
]


def split(values: list[str] | None) -> list[str]:
    """Repeated and comma-separated values as one list: -V a -V b,c -> [a, b, c]."""
    return [item.strip() for value in values or [] for item in value.split(",") if item.strip()]


def split_named(values: list[str] | None, option: str, hint: str = "name (rooflint list)") -> list[str]:
    """split(values), refusing an option given with nothing in it: `-V ,` or `--regime ''` (an empty
    shell variable) must not quietly mean the default, every variant or every regime."""
    names = split(values)
    if values is not None and not names:
        raise UserError(f"{option} {' '.join(values)!r} names nothing; give at least one {hint}")
    return names
