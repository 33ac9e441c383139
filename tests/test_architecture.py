"""The layers of docs/architecture.md, checked on every import of every module (lazy ones too).

core < outputs < analysis < engine < cli: a module may import its own layer and those below it,
never one above. kernels (families) may import core, engine.cuda_build and the kernels' own shared
helpers (rooflint.kernels, rooflint.kernels.common), and only models import them by name (a model is
built from named families); everything else asks the registry. models (whole models) may import
anything below cli; only cli imports models.

Two more rules over the same imports: no import circle anywhere (a lazy import inside a function that
closes one counts), and no `_private` name imported from another package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rooflint

PACKAGE = Path(rooflint.__file__).parent
ORDER = ("core", "outputs", "analysis", "engine", "cli")
# Modules a family may import beside rooflint.core: the nvcc build helper is how a .cu becomes a variant.
# Inside rooflint.kernels a family imports its own package, kernels/__init__ (sm_count, cuda_dtype) and
# kernels/common/ (helpers shared across families); another family only by its public names.
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
        ("rooflint.kernels.softmax.triton", "rooflint.kernels.common.pdl", True),
        ("rooflint.kernels.gelu_linear.cuda", "rooflint.engine.cuda_build", True),
        ("rooflint.models.ops.decode_layers", "rooflint.kernels.gelu_linear.skinny", True),
        ("rooflint.engine.worker", "rooflint.models.ops.sample", False),
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


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the rooflint modules it imports (lazy imports too; ``from pkg import submodule`` is the
    submodule). A module's import of its own enclosing package is left out: Python runs a package's
    ``__init__`` before any module inside it, so that order is fixed by the language. A family package's
    ``__init__`` imports its implementation modules at its end so they register their variants; each of
    them imports FAMILY back from the package, which is that fixed order, not a circle."""
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        importer = module_name(path, root)
        targets = graph.setdefault(importer, set())
        for _, imported in imports_of(path, root):
            if imported.startswith(root.name) and not importer.startswith(imported + ".") and imported != importer:
                targets.add(imported)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle, one per strongly connected group of modules, as a path that closes on
    itself (``a -> b -> a``); Tarjan's algorithm, iterative so deep graphs need no recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1 or node in graph.get(node, ()):
                    groups.append(_closed_path(graph, sorted(group)))
    return groups


def _closed_path(graph: dict[str, set[str]], group: list[str]) -> list[str]:
    """A shortest circle through the group's first module, by breadth-first search inside the group."""
    first, members = group[0], set(group)
    came_from: dict[str, str] = {}
    frontier = [first]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if child == first:
                    path = [node]
                    while path[-1] != first:
                        path.append(came_from[path[-1]])
                    return [first, *reversed(path[:-1]), first] if node != first else [first, first]
                if child in members and child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    return group


def test_no_import_circle_anywhere():
    found = [" -> ".join(path) for path in cycles(import_graph())]
    assert found == [], "import circles:\n" + "\n".join(found)


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def package_of(path: Path, root: Path = PACKAGE) -> str:
    name = module_name(path, root)
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def private_imports(path: Path, root: Path = PACKAGE) -> list[str]:
    """Each `_private` module or name this file imports from a package other than its own."""
    here = package_of(path, root)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            pairs = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            pairs = [(module, alias.name) for alias in node.names]
        else:
            continue
        for module, name in pairs:
            if not module.startswith(root.name):
                continue
            parts = module.split(".")
            private_at = next((i for i, part in enumerate(parts) if _private(part)), None)
            if private_at is not None:
                owner = ".".join(parts[:private_at])  # the package the private module belongs to
            elif name is not None and _private(name):
                owner = module if _is_module(module + ".__init__", root) else module.rsplit(".", 1)[0]
            else:
                continue
            if owner != here:
                shown = f"{module}.{name}" if name else module
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} imports {shown} from {owner}")
    return found


def test_no_private_name_is_imported_from_another_package():
    found = [line for path in sorted(PACKAGE.rglob("*.py")) for line in private_imports(path)]
    assert found == [], "\n".join(found)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "rooflint"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_lazy_import_that_closes_a_circle_is_found_and_named(tmp_path):
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "kernels/__init__.py": "",
            "kernels/gemm.py": "from rooflint.kernels.small import tile\n",
            "kernels/small.py": "def tile():\n    from rooflint.kernels import gemm\n",
            "kernels/fam/__init__.py": "FAMILY = 1\nfrom rooflint.kernels.fam import triton\n",
            "kernels/fam/triton.py": "from rooflint.kernels.fam import FAMILY\n",
        },
    )
    graph = import_graph(root)
    assert graph["rooflint.kernels.small"] == {"rooflint.kernels.gemm"}  # `from pkg import submodule`
    # A family package importing its implementations, which import FAMILY back, is no circle.
    assert cycles(graph) == [["rooflint.kernels.gemm", "rooflint.kernels.small", "rooflint.kernels.gemm"]]


def test_a_private_name_is_only_imported_inside_its_own_package(tmp_path):
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "kernels/__init__.py": "",
            "kernels/_helper.py": "",
            "kernels/fam/__init__.py": "_check = 1\n",
            "kernels/fam/triton.py": "from rooflint.kernels.fam import _check\nfrom rooflint.kernels import _helper\n",
            "kernels/other.py": "from rooflint.kernels.fam import _check\nfrom rooflint.kernels._helper import x\n",
        },
    )
    assert private_imports(root / "kernels/fam/triton.py", root) == [
        "rooflint/kernels/fam/triton.py:2 imports rooflint.kernels._helper from rooflint.kernels"
    ]
    assert private_imports(root / "kernels/other.py", root) == [
        "rooflint/kernels/other.py:1 imports rooflint.kernels.fam._check from rooflint.kernels.fam"
    ]


def test_the_architecture_page_names_every_registered_command():
    # docs/architecture.md's diagram lists the commands; a command added to COMMANDS and not there fails.
    from rooflint.cli.app import COMMANDS

    page = (PACKAGE.parents[1] / "docs" / "architecture.md").read_text()
    diagram = page.split("```")[1]
    listed = {word.strip() for line in diagram.splitlines() if "rooflint" in line or line.strip().startswith("|")
              for word in line.replace("rooflint", "").split("|")}  # fmt: skip
    assert {name for name, _ in COMMANDS} <= listed
