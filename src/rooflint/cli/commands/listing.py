"""`rooflint list`: families, their variants, and whether each can run here."""

from __future__ import annotations

from rooflint.cli.console import console, user_errors


@user_errors
def list_command() -> None:
    """List kernel families, their variants, and whether each can run on this machine.

    Example: rooflint list
    """
    from rich.markup import escape
    from rich.table import Table

    from rooflint.core.errors import UserError
    from rooflint.core.family import DEFAULT_DTYPE
    from rooflint.core.registry import family_names, get_family
    from rooflint.engine.bench import resolve_device
    from rooflint.engine.worker import missing_requirement

    device = resolve_device(None)
    table = Table(title=f"rooflint families (this machine: {device})")
    for column in ("family", "variant", "kind", "runs here", "what it is"):
        table.add_column(column)
    own_precisions = []  # the families bench runs in other dtypes than bf16 when no --dtype is given
    for name in family_names():
        try:
            family = get_family(name)
        except Exception as error:  # noqa: BLE001 - a family that fails to import is reported, not fatal
            # A UserError says what failed itself (an import, or a name claimed twice).
            why = str(error) if isinstance(error, UserError) else f"import failed: {error}"
            table.add_row(escape(name), "-", "-", f"[red]{escape(why)}[/]", "")
            continue
        if family.default_dtypes != (DEFAULT_DTYPE,):
            own_precisions.append(f"{name}: {', '.join(family.default_dtypes)}")
        for variant in family.ordered_variants():
            reason = missing_requirement(variant, device)
            # A plugin's names are its own text: escaped as its description is (rich raised on "[/x]").
            table.add_row(
                escape(name),
                escape(variant.name),
                variant.kind,
                "[green]yes[/]" if reason is None else f"[yellow]{escape(reason)}[/]",
                escape(variant.description),
            )
        table.add_section()
    table.caption = escape(
        f"bench without --dtype runs {DEFAULT_DTYPE}, or a family's own precisions where it has no {DEFAULT_DTYPE}"
        + (f" ({'; '.join(own_precisions)})" if own_precisions else "")
    )
    console.print(table)
