"""Triton's CPU interpreter, with the builtin members of the `triton.language` packages listed once,
and patched once per kernel launch rather than again on every helper call.

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

A kernel launch patches the language (and restores it when its grid is done); each call of a
@triton.jit helper inside it patched it all again, to the same behaviour, and left that for the
launch's restore (the decode GEMMs call helpers in every K step: thousands of calls a launch). Here
a helper call inside a launch whose patching already covers the helper's language modules patches
nothing: the state is the one the repeated patching produced, and the launch's restore undoes the
same changes. A helper that names a module the launch did not, or one called outside any launch,
is patched as before.
"""

from __future__ import annotations

import inspect

ORIGINAL_PATCH_LANG = """def _patch_lang(fn):
    scope = _LangPatchScope()
    langs = [value for _, value in fn.__globals__.items() if inspect.ismodule(value) and value in [tl, tl.core]]
    assert len(langs) >= 1, "triton.language must be visible from within jit'd function"
    for lang in langs:
        _patch_builtin(lang, interpreter_builder, scope)
        _patch_builtin(lang.tensor, interpreter_builder, scope)
        if lang == tl:
            _patch_builtin(lang.math, interpreter_builder, scope)
        _patch_lang_tensor(lang.tensor, scope)
        _patch_lang_core(lang, scope)
    _patch_builtin(tl.core.tensor_descriptor_base, interpreter_builder, scope)
    return scope
"""

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


def patch_once_per_launch() -> bool:
    """Make a helper call inside a kernel launch skip re-patching what the launch already patched;
    False (nothing changed) where Triton is missing or its _patch_lang is not ORIGINAL_PATCH_LANG."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    original = getattr(interpreter, "_patch_lang", None)
    executor = getattr(interpreter, "GridExecutor", None)
    try:
        if original is None or executor is None or inspect.getsource(original) != ORIGINAL_PATCH_LANG:
            return False
    except (OSError, TypeError):
        return False
    tl = interpreter.tl
    launch_call = executor.__call__
    # One entry per running launch (launches do not nest; a list keeps it exact if they ever did):
    # the ids of the language modules its patching covers, None before the launch's own patching.
    launches: list[frozenset[int] | None] = []

    def patch_lang(fn):
        langs = frozenset(id(value) for value in fn.__globals__.values() if value is tl or value is tl.core)
        covered = launches[-1] if launches else None
        if langs and covered is not None and langs <= covered:
            return interpreter._LangPatchScope()  # already patched by this launch; nothing to restore
        scope = original(fn)
        if launches:  # the launch's restore undoes its own patching; a helper's stays until then, as before
            launches[-1] = langs | (covered or frozenset())
        return scope

    def launch(self, *args, **kwargs):
        launches.append(None)
        try:
            return launch_call(self, *args, **kwargs)
        finally:
            launches.pop()

    interpreter._patch_lang = patch_lang
    interpreter.GridExecutor.__call__ = launch
    return True


def np_dtypes_looked_up_once() -> bool:
    """Remember the interpreter's numpy dtype of each Triton type; False (nothing changed) where Triton
    is missing or its _get_np_dtype is not the table lookup described here.

    _get_np_dtype builds its table of 19 numpy dtypes on every call, and the interpreter calls it for
    every load, store, cast and constant (tens of thousands of calls a model step). Its answer
    depends only on the type's class and name (a block type's name holds its element type; the
    table's keys compare by name), so each (class, name) is asked once; a type it refuses is asked
    again, and refused again, every time."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    original = getattr(interpreter, "_get_np_dtype", None)
    try:
        source = inspect.getsource(original) if original is not None else ""
    except (OSError, TypeError):
        return False
    # the Triton read here: block and pointer types by isinstance, the rest through the table, nothing else
    if not source.startswith("def _get_np_dtype(tt_dtype):") or not source.rstrip().endswith(
        "return np_types[tt_dtype]"
    ):
        return False
    known: dict[tuple[type, str], object] = {}

    def get_np_dtype(tt_dtype):
        key = (type(tt_dtype), getattr(tt_dtype, "name", None))
        found = known.get(key)
        if found is None:
            found = original(tt_dtype)
            if key[1] is not None:
                known[key] = found
        return found

    interpreter._get_np_dtype = get_np_dtype
    return True
