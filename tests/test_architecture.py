"""The layers of docs/architecture.md, checked on every import of every module (lazy ones too).

core < outputs < analysis < engine < cli: a module may import its own layer and those below it,
never one above. kernels (families) may import core and engine.cuda_build only, and only models
import them by name (a model is built from named families); everything else asks the registry.
models (whole models) may import anything below cli; only cli imports models.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rooflint

PACKAGE = Path(rooflint.__file__).parent
ORDER = ("core", "outputs", "analysis", "engine", "cli")
# Modules a family may import beside rooflint.core: the nvcc build helper is how a .cu becomes a variant.
KERNEL_MAY_IMPORT = ("rooflint.core", "rooflint.kernels", "rooflint.engine.cuda_build")


def layer_of(module: str) -> str:
    """rooflint.engine.bench -> engine. The package root (its version) and the spec data sit in core."""
    parts = module.split(".")
    if parts[0] != "rooflint":
        return "external"
    if len(parts) == 1 or parts[1] in ("hardware_specs", "__init__"):
        return "core"
    if parts[1] == "__main__":
        return "cli"
    return parts[1]


def module_name(path: Path, package: Path = PACKAGE) -> str:
    relative = path.relative_to(package.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = PACKAGE) -> list[tuple[int, str]]:
    """(line, imported module) for every import statement in the file, relative ones resolved."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from rooflint.engine import cuda_build` imports the submodule; `from rooflint import
            # __version__` imports a name from the package itself.
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.append((node.lineno, submodule if _is_module(submodule, root) else target))
    return found


def _is_module(name: str, root: Path) -> bool:
    path = root.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def violation(importer: str, imported: str) -> str | None:
    """Why importer may not import imported, or None when the arrow points down (or sideways)."""
    source, target = layer_of(importer), layer_of(imported)
    if target == "external" or source == target == "kernels":
        return None
    if target == "kernels":
        if source == "models":
            return None  # a model is built from named kernel families
        return "families are found by the registry, never imported by name"
    if source == "kernels":
        if any(imported == allowed or imported.startswith(allowed + ".") for allowed in KERNEL_MAY_IMPORT):
            return None
        return "a family may import only rooflint.core and rooflint.engine.cuda_build"
    if target == "models":
        return None if source in ("models", "cli") else "only the command line sits above models"
    if source == "models":
        return None if target != "cli" else "models sit below the command line"
    if source not in ORDER or target not in ORDER:
        return f"{source if source not in ORDER else target} is not a known layer: add it to docs/architecture.md"
    if ORDER.index(target) > ORDER.index(source):
        return f"{source} sits below {target}"
    return None


def all_violations() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = module_name(path)
        for line, imported in imports_of(path):
            if not imported.startswith("rooflint"):
                continue
            why = violation(importer, imported)
            if why:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {imported}: {why}")
    return found


def test_no_import_points_up_a_layer():
    assert all_violations() == []


def test_every_module_is_in_a_known_layer():
    layers = {layer_of(module_name(path)) for path in PACKAGE.rglob("*.py")}
    assert layers <= set(ORDER) | {"kernels", "models"}, layers


@pytest.mark.parametrize(
    "importer, imported, allowed",
    [
        ("rooflint.cli.commands.bench", "rooflint.engine.bench", True),
        ("rooflint.engine.bench", "rooflint.analysis.lint", True),
        ("rooflint.outputs.report", "rooflint.core.specs", True),
        ("rooflint.core.specs", "rooflint.outputs.results", False),
        ("rooflint.outputs.report", "rooflint.cli.console", False),
        ("rooflint.analysis.lint", "rooflint.engine.worker", False),
        ("rooflint.kernels.softmax", "rooflint.engine.cuda_build", True),
        ("rooflint.kernels.softmax", "rooflint.engine.timing", False),
        ("rooflint.engine.worker", "rooflint.kernels.softmax", False),
        ("rooflint.models.llama", "rooflint.engine.bench", True),
        ("rooflint.models.llama", "rooflint.kernels.attention", True),
        ("rooflint.models.llama", "rooflint.cli.app", False),
        ("rooflint.engine.fleet.dask", "rooflint.models.llama", False),
        ("rooflint.cli.commands.model", "rooflint.models.llama", True),
        ("rooflint.__main__", "rooflint.cli", True),
        ("rooflint.core.registry", "rooflint", True),
    ],
)
def test_the_rule_itself(importer, imported, allowed):
    assert (violation(importer, imported) is None) == allowed


def test_imports_are_read_from_the_source(tmp_path):
    # A lazy import inside a function counts: it is still an arrow between layers.
    core, engine = tmp_path / "rooflint" / "core", tmp_path / "rooflint" / "engine"
    core.mkdir(parents=True)
    engine.mkdir()
    (engine / "bench.py").write_text("")
    (core / "bad.py").write_text("def f():\n    from ..engine import bench\n    import rooflint.cli.app\n")
    found = imports_of(core / "bad.py", tmp_path / "rooflint")
    assert found == [(2, "rooflint.engine.bench"), (3, "rooflint.cli.app")]
    assert [violation("rooflint.core.bad", name) for _, name in found] == [
        "core sits below engine",
        "core sits below cli",
    ]
