"""Look families up by name, importing each module only when it is asked for.

Built-in families are listed in rooflint.kernels.FAMILY_NAMES. Your own families join them through
ROOFLINT_FAMILY_MODULES, a comma-separated list of importable modules that each define FAMILY:
``ROOFLINT_FAMILY_MODULES=mykernels.fused_rmsnorm rooflint bench fused_rmsnorm``.
"""

from __future__ import annotations

import importlib
import os

from rooflint.errors import UserError
from rooflint.family import Family
from rooflint.kernels import FAMILY_NAMES

PLUGIN_VARIABLE = "ROOFLINT_FAMILY_MODULES"


def _plugins() -> dict[str, str]:
    """family name -> module path for the modules named in ROOFLINT_FAMILY_MODULES."""
    plugins = {}
    for module_path in filter(None, (m.strip() for m in os.environ.get(PLUGIN_VARIABLE, "").split(","))):
        try:
            module = importlib.import_module(module_path)
        except ImportError as error:
            raise UserError(f"{PLUGIN_VARIABLE}: cannot import {module_path!r}: {error}") from None
        family = getattr(module, "FAMILY", None)
        if not isinstance(family, Family):
            raise UserError(f"{PLUGIN_VARIABLE}: module {module_path!r} defines no FAMILY (a rooflint.family.Family)")
        plugins[family.name] = module_path
    return plugins


def family_names() -> list[str]:
    return list(FAMILY_NAMES) + [name for name in _plugins() if name not in FAMILY_NAMES]


def get_family(name: str) -> Family:
    if name in FAMILY_NAMES:
        return importlib.import_module(f"rooflint.kernels.{name}").FAMILY
    plugins = _plugins()
    if name in plugins:
        return importlib.import_module(plugins[name]).FAMILY
    raise UserError(f"unknown family {name!r}; valid: {', '.join(family_names())} or all")


def resolve_families(names: list[str]) -> list[str]:
    """Expand 'all' and reject unknown names before anything runs."""
    known = family_names()
    if not names or names == ["all"]:
        return known
    for name in names:
        if name not in known:
            raise UserError(f"unknown family {name!r}; valid: {', '.join(known)} or all")
    return names
