"""Which variants a user asked for: by name (``triton_v2``) or by kind (``triton``), for any family;
and which dtypes of a family a bench runs.

bench and profile both take ``--variants``; this module is the one place the words are checked and
matched, so a name means the same in every command.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rooflint.core.errors import UserError
from rooflint.core.family import VARIANT_KINDS


def check_variant_names(names: Iterable[str], families: Iterable[Any]) -> None:
    """Fail on a word that is neither a variant kind nor a variant of any of ``families``.

    Checked across all the families of a run: ``-V triton_v2`` is fine when one family has it.
    """
    known = set(VARIANT_KINDS)
    for family in families:
        known.update(family.variants)
    for name in names:
        if name not in known:
            raise UserError(f"unknown variant {name!r}; valid: {', '.join(sorted(known))}")


def select_variants(family: Any, names: Iterable[str] = (), dtype: str | None = None) -> list[Any]:
    """The family's variants in run order whose name or kind is in ``names`` (all when empty),
    leaving out those that do not support ``dtype``. Unknown words are not errors here: check
    them first with check_variant_names, across every family of the run."""
    wanted = set(names)
    return [
        variant
        for variant in family.ordered_variants()
        if (not wanted or variant.name in wanted or variant.kind in wanted)
        and not (dtype and variant.dtypes and dtype not in variant.dtypes)
    ]


def in_asked_order(chosen: Sequence[Any], names: Sequence[str] = ()) -> list[Any]:
    """``chosen`` variants in the order ``names`` gives them (a variant by its name, else by its
    kind), the rest after in their own order: the first variant a user names is the one others are
    compared against."""

    first = {name: i for i, name in reversed(list(enumerate(names)))}  # a name's first place
    return sorted(chosen, key=lambda v: first.get(v.name, first.get(v.kind, len(names))))


def select_dtypes(family: Any, asked: Sequence[str] = ()) -> tuple[str, ...]:
    """The dtypes of ``family`` a bench runs, in the order asked.

    With no ``--dtype`` (``asked`` empty), the family's defaults: bf16, or for a family without bf16
    (scaled_gemm, weight_only_gemm) the formats it declares, so one ``bench all`` covers every
    family. With ``--dtype``, only those of the asked dtypes the family declares: a family that runs
    none of them has no rows (plan() says so when no family of the run has any)."""
    if not asked:
        return family.default_dtypes
    return tuple(dtype for dtype in asked if dtype in family.dtypes)
