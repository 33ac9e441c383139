"""Find kernel families by name, with no central list to edit.

Three sources, in this order:
- built-ins: every public module and public subpackage of ``rooflint.kernels`` (``softmax/``, whose
  ``__init__`` defines the family ``softmax``, or a single module ``layernorm_gelu.py``), found by
  listing the package by name, so adding a package or a file is all a new built-in needs. The
  subpackages in RESERVED hold what families share and are not families;
- installed plugins: the entry-point group ``rooflint.families``, where an entry's name is the
  family name and its value the module defining ``FAMILY`` (``fused_rmsnorm = "mykernels.rmsnorm"``);
- quick experiments: ``ROOFLINT_FAMILY_MODULES=mykernels.rmsnorm,...``, modules that define FAMILY.

A name claimed by two sources is an error naming both, never a silent pick, raised when that family is
asked for (or `all`): one plugin's clash must not take every other family down with it. Modules are
imported only when a family is asked for, except the environment variable's, whose family names are
only known by importing them.
"""

from __future__ import annotations

import functools
import importlib
import os
import pkgutil
from dataclasses import dataclass, replace
from importlib import metadata
from typing import TYPE_CHECKING

from rooflint.core.errors import UserError, describe_import

if TYPE_CHECKING:  # core.family imports torch: naming and listing families must not (a typo'd name fails fast)
    from rooflint.core.family import Family

PLUGIN_VARIABLE = "ROOFLINT_FAMILY_MODULES"
ENTRY_POINT_GROUP = "rooflint.families"
BUILTIN_PACKAGE = "rooflint.kernels"
# Subpackages of rooflint.kernels that are not families: shared helpers (common/), new-family's source
# (templates/) and the CUDA headers (include/, no Python in it).
RESERVED = frozenset({"common", "templates", "include"})
ALL = "all"  # the name that asks for every family


@dataclass(frozen=True)
class FamilySource:
    name: str
    module: str  # importable module that defines FAMILY
    origin: str  # "built-in", "entry point <dist>", or the environment variable
    clash: str = ""  # set when a second source claims the name: the error that asking for it raises

    def describe(self) -> str:
        return f"{self.module} ({self.origin})"


def _builtins() -> list[FamilySource]:
    package = importlib.import_module(BUILTIN_PACKAGE)
    # Decided by name, importing no family: listing names must not load torch and every kernel.
    modules = pkgutil.iter_modules(package.__path__)
    names = sorted(m.name for m in modules if not m.name.startswith("_") and m.name not in RESERVED)
    return [FamilySource(name, f"{BUILTIN_PACKAGE}.{name}", "built-in") for name in names]


def _entry_points() -> list[FamilySource]:
    return list(_scan_entry_points(metadata.entry_points))


@functools.cache
def _scan_entry_points(entry_points) -> tuple[FamilySource, ...]:
    # Reading every installed distribution's metadata takes ~8 ms, and a bench looks families up
    # once per task: scan once per process. Keyed by the lookup function, so a test that swaps
    # metadata.entry_points for a fake gets a fresh scan.
    sources = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(entry, "dist", None)
        where = f"entry point of {dist.name}" if dist is not None else "entry point"
        sources.append(FamilySource(entry.name, entry.value.partition(":")[0], where))
    return tuple(sources)


def _environment() -> list[FamilySource]:
    sources = []
    for module_path in filter(None, (m.strip() for m in os.environ.get(PLUGIN_VARIABLE, "").split(","))):
        family = _import_family(FamilySource("?", module_path, PLUGIN_VARIABLE))
        sources.append(FamilySource(family.name, module_path, PLUGIN_VARIABLE))
    return sources


def sources() -> dict[str, FamilySource]:
    """Every known family name and where it comes from; a name claimed twice carries the error naming both."""
    found: dict[str, FamilySource] = {}
    for source in _builtins() + _entry_points() + _environment():
        if source.name == ALL:  # `bench all` means every family: one named all could never be asked for alone
            found[ALL] = replace(
                source,
                clash=f"family name {ALL!r} is reserved (`rooflint bench all` runs every family): "
                f"{source.describe()} must take another name",
            )
            continue
        other = found.setdefault(source.name, source)
        if other.module != source.module and not other.clash:
            clash = f"family name {source.name!r} is claimed twice: by {other.describe()} and by {source.describe()}"
            found[source.name] = replace(other, clash=f"{clash}; rename one of them")
    return found


def _import_family(source: FamilySource) -> Family:
    from rooflint.core.family import Family

    try:
        module = importlib.import_module(source.module)
    except ImportError as error:
        raise UserError(f"family module {source.describe()} cannot be imported: {error}") from None
    except (Exception, SystemExit) as error:  # a plugin's own bug (two baselines, say): name its module
        raise UserError(f"family module {source.describe()} failed to import: {describe_import(error)}") from error
    family = getattr(module, "FAMILY", None)
    if not isinstance(family, Family):
        raise UserError(f"family module {source.describe()} defines no FAMILY (a rooflint.core.family.Family)")
    if not family.variants:
        # Its variant modules never imported (the import at the end of its __init__ missing): `list`
        # showed no line for it and bench said no family supports the variants asked for.
        raise UserError(
            f"family module {source.describe()} defines FAMILY {family.name!r} with no variant; register one "
            "with @FAMILY.variant(...) in a module the family module imports"
        )
    if source.name != "?" and family.name != source.name:
        raise UserError(
            f"family module {source.describe()} is registered as {source.name!r} but its FAMILY is named "
            f"{family.name!r}; make the two names the same"
        )
    return family


def family_names() -> list[str]:
    return list(sources())


@functools.cache
def _load(name: str, module: str, origin: str) -> Family:
    return _import_family(FamilySource(name, module, origin))


def family_source(name: str) -> FamilySource:
    """Where the family ``name`` comes from, importing no family module (but the environment
    variable's): one line where no source names it, or two claim it."""
    known = sources()
    if name not in known:
        raise UserError(f"unknown family {name!r}; valid: {', '.join(known)}")
    source = known[name]
    if source.clash:
        raise UserError(source.clash)
    return source


def get_family(name: str) -> Family:
    source = family_source(name)
    return _load(source.name, source.module, source.origin)


def resolve_families(names: list[str]) -> list[str]:
    """Expand 'all' and reject unknown names before anything runs."""
    known = family_names()
    if not names or names == [ALL]:
        return known
    for name in names:
        if name not in known:
            raise UserError(f"unknown family {name!r}; valid: {', '.join(known)} or all")
    return names
