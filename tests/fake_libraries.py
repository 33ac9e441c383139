"""Fake third-party kernel libraries for the CPU tests of library peers (issue 41): modules put into
sys.modules under the libraries' real names, with functions of the libraries' real signatures."""

from __future__ import annotations

import sys
import types


def install(monkeypatch, name: str, version: str | None = None, **functions) -> types.ModuleType:
    """Make ``name`` (say ``liger_kernel.transformers.functional``) importable with ``functions`` in it.
    Parents faked earlier in the same test are kept, so several submodules of one library coexist;
    monkeypatch removes every fake after the test."""
    parts = name.split(".")
    module = None
    for depth in range(1, len(parts) + 1):
        path = ".".join(parts[:depth])
        existing = sys.modules.get(path)
        if existing is not None and getattr(existing, "__fake__", False):
            child = existing
        else:
            child = types.ModuleType(path)
            child.__fake__ = True
            monkeypatch.setitem(sys.modules, path, child)
        if module is not None:
            setattr(module, parts[depth - 1], child)
        module = child
    if version is not None:
        sys.modules[parts[0]].__version__ = version
    for key, value in functions.items():
        setattr(module, key, value)
    return module
