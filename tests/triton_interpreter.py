"""Triton's CPU interpreter, with the builtin members of the `triton.language` packages listed once.

On every call of a @triton.jit function, kernel or helper, the interpreter patches the language's
builtins to run in numpy; to find them it lists every member of triton.language, tensor, math and
core with inspect.getmembers. A kernel whose programs call helpers (the decode GEMMs, the persistent
decode-layers kernel) spent a quarter of its interpreted time in those listings.

Here each package is listed once (again, adding to the names, if it gains a member) and each call
patches those of its names that hold a builtin now: what the original patches, in the same order.
A name the first listing missed holds no builtin then because the interpreter's own overrides
(reduce and associative_scan in core) replaced it, and those overrides are applied again after every
patching, as before. Applied only where Triton's function is the one read here; elsewhere Triton is
left as it is.
"""

from __future__ import annotations

import inspect

ORIGINAL = """def _patch_builtin(pkg, builder, scope: _LangPatchScope):
    for name, member in inspect.getmembers(pkg):
        if tl.core.is_builtin(member):
            _patch_attr(pkg, name, member, builder, scope)
"""


def list_builtins_once() -> bool:
    """Replace the interpreter's _patch_builtin with one that lists each package once; False (nothing
    changed) where Triton is missing or its function is not ORIGINAL."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return False
    original = getattr(interpreter, "_patch_builtin", None)
    try:
        if original is None or inspect.getsource(original) != ORIGINAL or not hasattr(interpreter, "_patch_attr"):
            return False
    except (OSError, TypeError):
        return False

    listed: dict[int, tuple[int, list[str]]] = {}  # id(package): (its number of members, builtin names)

    def patch_builtin(pkg, builder, scope):
        size = len(dir(pkg))
        known = listed.get(id(pkg))
        if known is None or known[0] != size:
            found = {name for name, member in inspect.getmembers(pkg) if tl.core.is_builtin(member)}
            known = listed[id(pkg)] = (size, sorted(found.union(known[1] if known else ())))
        for name in known[1]:
            member = getattr(pkg, name, None)
            if tl.core.is_builtin(member):
                interpreter._patch_attr(pkg, name, member, builder, scope)

    interpreter._patch_builtin = patch_builtin
    return True
