"""`rooflint new-family NAME`: write a working family module and its test, ready to edit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rooflint.cli.console import console, print_written, user_errors
from rooflint.cli.options import path_option

PLACEHOLDER = "my_family"  # the name the templates are written with (rooflint/kernels/templates)


@user_errors
def new_family_command(
    name: Annotated[str, typer.Argument(help="Family name: a Python identifier, also the module's name.")],
    out: Annotated[
        Path,
        path_option(
            "--out",
            "Folder to write NAME.py and test_NAME.py into.",
            "name the folder to write into (default: the current folder)",
        ),
    ] = Path("."),
) -> None:
    """Write NAME.py, a working kernel family (vector_add as a starting point), and its test.

    The module has sizes, inputs, a float64 reference, a cost model, an eager baseline, a compile
    and a Triton variant. Nothing in rooflint needs editing to run it: put its folder on PYTHONPATH
    and name it in ROOFLINT_FAMILY_MODULES, or register it under the rooflint.families entry point.
    One module is a whole family; grown, it becomes a package like rooflint's own (NAME/__init__.py
    with one module per implementation and NAME.cu beside them), as NAME.py's docstring says.

    Example: rooflint new-family my_rmsnorm --out mykernels
    """
    import shlex

    from rich.markup import escape

    written = write_family(name, out)
    for path in written:
        print_written([path])
    # Escaped as the paths are: rich took "[bold]" in a folder's name for a style and printed another
    # folder to cd into, and raised on "[/x]" after both files were written (exit 1).
    folder = escape(shlex.quote(str(out)))  # a folder with a space or a quote in its name still pastes as one word
    console.print(
        f"try it: cd {folder} && PYTHONPATH=. ROOFLINT_FAMILY_MODULES={name} rooflint bench {name} --device cpu "
        f"--size small; python -m pytest test_{name}.py",
        highlight=False,
        soft_wrap=True,
    )


def write_family(name: str, out: Path) -> list[Path]:
    """Check the name and the target files, then write both files (never overwriting one)."""
    import importlib.util
    import keyword
    import os
    import sys

    import rooflint
    from rooflint.core.errors import UserError
    from rooflint.core.paths import write_text
    from rooflint.core.registry import ALL, family_names

    if not name.isidentifier() or keyword.iskeyword(name) or not name.isascii():
        raise UserError(
            f"family name {name!r} is not an ASCII Python identifier; valid: ASCII letters, digits and _, "
            "not starting with a digit, and no Python keyword, e.g. my_op"
        )
    if name == ALL:  # `rooflint bench all` means every family: one named all could never be run alone
        raise UserError("family name 'all' is reserved: `rooflint bench all` runs every family; pick another name")
    if name in family_names():
        raise UserError(f"a family named {name!r} already exists (see rooflint list); pick another name")
    targets = {out / f"{name}.py": "my_family.py", out / f"test_{name}.py": "my_family_checks.py"}
    # lexists: a dangling link is a name taken too; written through, it made a file where it points
    existing = [str(path) for path in targets if os.path.lexists(path)]
    if existing:
        verb = "exists" if len(existing) == 1 else "exist"
        raise UserError(f"{' and '.join(existing)} already {verb}; new-family never overwrites: pick another --out")
    if name in sys.modules or importlib.util.find_spec(name) is not None:
        raise UserError(f"a module named {name!r} is already importable here; a family of that name would shadow it")
    templates = Path(rooflint.__file__).parent / "kernels" / "templates"
    written: list[Path] = []
    try:
        for path, template in targets.items():
            write_text(path, (templates / template).read_text().replace(PLACEHOLDER, name), "family file")
            written.append(path)
    except BaseException:
        # Both files or neither: a module left without its test made the next try refused as "already
        # exists" for a family that was never written whole.
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return written
