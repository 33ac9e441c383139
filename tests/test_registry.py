"""What makes a family findable and comparable: its name and source, its declared baseline, no triton needed.

Clashes are tested through each route a family arrives by (the environment variable, an entry point);
the baseline through the worker itself, run in an order where the old rule ("the first eager-kind row
that ran") and the declared one give different answers.
"""

import math
import os
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest

from rooflint.core import registry
from rooflint.core.errors import UserError
from rooflint.core.family import Cost, Family, randn
from rooflint.core.specs import get_spec

FAMILY_SOURCE = '''
from rooflint.core.family import Cost, Family, randn

FAMILY = Family(
    {name!r},
    summary="y = 2x",
    sizes={{"small": [{{"n": 64}}], "large": [{{"n": 4096}}]}},
    make_inputs=lambda p, dtype, device, gen: {{"x": randn([p["n"]], dtype, device, gen)}},
    reference=lambda inputs, p: inputs["x"].double() * 2,
    cost=lambda p, dtype: Cost(cuda_flops=p["n"], bytes=8 * p["n"]),
    dtypes=("fp32",),
)


@FAMILY.variant("a_first", kind="eager")
def a_first(case):
    """sorts before the baseline by name"""
    x = case["x"]
    return lambda: x + x


@FAMILY.variant("reference_path", kind="eager", baseline=True)
def reference_path(case):
    """the declared baseline"""
    x = case["x"]
    return lambda: x * 2
'''


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """A folder on sys.path to write family modules into, with the module cache cleaned after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("plugin_"):
            del sys.modules[name]
    registry._load.cache_clear()


def write_family(folder, module, name):
    (folder / f"{module}.py").write_text(FAMILY_SOURCE.format(name=name))


def test_builtins_are_every_public_package_and_module_of_the_kernels_package():
    names = registry.family_names()
    assert {"vector_add", "softmax", "attention", "kv_cache", "layernorm_gelu"} <= set(names)
    assert not [name for name in names if name.startswith("_")]
    assert not set(names) & registry.RESERVED  # common/ (shared helpers) and templates/ are no families
    assert registry.sources()["softmax"].describe() == "rooflint.kernels.softmax (built-in)"
    # A package family (softmax/) and a single-module one (layernorm_gelu.py) load alike, with the
    # variants its implementation modules register.
    assert {"eager", "triton", "cuda"} <= set(registry.get_family("softmax").variants)
    assert {"eager", "triton", "cuda"} <= set(registry.get_family("layernorm_gelu").variants)


def test_listing_the_families_imports_none_of_them():
    # Names come from the folder listing: `rooflint list` must not load every kernel to name them.
    script = (
        "import sys\nfrom rooflint.core import registry\nnames = registry.family_names()\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('rooflint.kernels.'))\n"
        "assert 'softmax' in names and not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def test_a_public_subpackage_is_a_family_and_the_reserved_ones_are_not(tmp_path, monkeypatch):
    kernels = tmp_path / "fake_kernels"
    for folder in ("newfam", "common", "templates", "_private"):
        (kernels / folder).mkdir(parents=True)
        (kernels / folder / "__init__.py").write_text("")
    (kernels / "__init__.py").write_text("")
    (kernels / "single.py").write_text("")
    (kernels / "_helper.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "BUILTIN_PACKAGE", "fake_kernels")
    assert [source.name for source in registry._builtins()] == ["newfam", "single"]


def test_a_family_package_finds_its_cuda_source_beside_it():
    from rooflint.engine import cuda_build
    from rooflint.kernels import layernorm
    from rooflint.kernels.layernorm import cuda

    # From the package (a model's kernel set asks this way) and from the implementation module by name.
    assert cuda_build.family_source(layernorm.__file__).name == "layernorm.cu"
    assert cuda_build.family_source(layernorm.__file__).is_file()
    assert cuda_build.family_source(cuda.__file__, "layernorm") == cuda_build.family_source(layernorm.__file__)
    # A plugin's single module keeps its own stem.
    assert cuda_build.family_source("/plugins/mykernels/rmsnorm.py").name == "rmsnorm.cu"


def test_environment_plugin_claiming_a_builtin_name_is_an_error_naming_both(plugin_dir, monkeypatch):
    write_family(plugin_dir, "plugin_clash", "softmax")
    monkeypatch.setenv(registry.PLUGIN_VARIABLE, "plugin_clash")
    assert "vector_add" in registry.family_names()  # the clash costs only the name claimed twice
    with pytest.raises(UserError) as error:
        registry.get_family("softmax")
    message = str(error.value)
    assert "'softmax' is claimed twice" in message
    assert "rooflint.kernels.softmax (built-in)" in message
    assert f"plugin_clash ({registry.PLUGIN_VARIABLE})" in message


def fake_entry_points(*entries):
    points = [metadata.EntryPoint(name, value, registry.ENTRY_POINT_GROUP) for name, value in entries]

    def entry_points(*, group):
        assert group == registry.ENTRY_POINT_GROUP
        return points

    return entry_points


def test_entry_point_claiming_a_builtin_name_is_an_error_naming_both(monkeypatch):
    monkeypatch.setattr(registry.metadata, "entry_points", fake_entry_points(("attention", "theirs.attention")))
    with pytest.raises(
        UserError,
        match=r"'attention' is claimed twice: by rooflint\.kernels\.attention \(built-in\) "
        r"and by theirs\.attention \(entry point\)",
    ):
        registry.get_family("attention")


def test_entry_point_family_is_listed_loaded_and_benchable_by_name(plugin_dir, monkeypatch):
    write_family(plugin_dir, "plugin_doubler", "doubler")
    monkeypatch.setattr(registry.metadata, "entry_points", fake_entry_points(("doubler", "plugin_doubler")))
    assert "doubler" in registry.family_names()
    assert registry.resolve_families(["doubler"]) == ["doubler"]
    assert registry.get_family("doubler").name == "doubler"
    # The same module through the environment variable too is one family, not a clash.
    monkeypatch.setenv(registry.PLUGIN_VARIABLE, "plugin_doubler")
    assert registry.sources()["doubler"].module == "plugin_doubler"


def test_entry_point_whose_family_has_another_name_is_refused(plugin_dir, monkeypatch):
    write_family(plugin_dir, "plugin_misnamed", "tripler")
    monkeypatch.setattr(registry.metadata, "entry_points", fake_entry_points(("doubler", "plugin_misnamed")))
    with pytest.raises(UserError, match="registered as 'doubler' but its FAMILY is named 'tripler'"):
        registry.get_family("doubler")


def test_unknown_family_lists_the_valid_names():
    # 'all' is valid where several families are named (bench), never for one family (ab, profile).
    with pytest.raises(UserError, match=r"unknown family 'nope'; valid: .*vector_add.* or all"):
        registry.resolve_families(["nope"])
    with pytest.raises(UserError, match=r"unknown family 'nope'; valid: .*vector_add(?!.* or all)"):
        registry.get_family("nope")


def tiny_family(name="tiny"):
    return Family(
        name,
        summary="",
        sizes={"small": [{"n": 4}], "large": [{"n": 8}]},
        make_inputs=lambda p, dtype, device, gen: {"x": randn([p["n"]], dtype, device, gen)},
        reference=lambda inputs, p: inputs["x"].double(),
        cost=lambda p, dtype: Cost(bytes=1),
    )


def test_two_declared_baselines_are_refused_at_registration():
    family = tiny_family()
    family.variant("one", kind="eager", baseline=True)(lambda case: None)
    with pytest.raises(ValueError, match="declares two baselines, 'one' and 'two'"):
        family.variant("two", kind="compile", baseline=True)(lambda case: None)


def test_undeclared_baseline_falls_back_to_the_variant_named_eager_and_else_to_none():
    family = tiny_family()
    family.variant("alpha", kind="eager")(lambda case: None)
    assert family.baseline is None  # no declaration, no "eager": rows carry no speedup
    family.variant("eager")(lambda case: None)
    assert family.baseline is family.variants["eager"]


def test_declared_baseline_leads_the_run_order_whatever_its_kind_and_name():
    family = tiny_family()
    for name, kind in (("eager", "eager"), ("aaa", "eager"), ("zz_ref", "compile")):
        family.variant(name, kind=kind, baseline=name == "zz_ref")(lambda case: None)
    assert [v.name for v in family.ordered_variants()] == ["zz_ref", "aaa", "eager"]


def test_every_builtin_declares_one_eager_baseline_that_runs_first():
    for name in registry.family_names():
        family = registry.get_family(name)
        declared = [v for v in family.variants.values() if v.baseline]
        assert len(declared) == 1, name
        assert family.ordered_variants()[0] is declared[0], name
        assert declared[0].kind == "eager", name


def test_speedup_is_against_the_declared_baseline_not_the_first_eager_row(plugin_dir, monkeypatch):
    from rooflint.engine.worker import Task, Worker

    write_family(plugin_dir, "plugin_speedup", "speedup_probe")
    monkeypatch.setenv(registry.PLUGIN_VARIABLE, "plugin_speedup")
    worker = Worker("cpu", get_spec("h100_sxm"))

    def run(variant):
        return worker.run(Task("speedup_probe", variant, "fp32", "small", {"n": 64}))

    # a_first runs before the baseline here: under the old rule it would have become the baseline.
    early, baseline, late = run("a_first"), run("reference_path"), run("a_first")
    assert early.status == baseline.status == late.status == "ok"
    assert math.isnan(early.speedup_vs_eager)
    assert baseline.speedup_vs_eager == 1.0
    assert late.speedup_vs_eager == pytest.approx(baseline.median_ms / late.median_ms, rel=1e-12)


NO_TRITON_CHECK = textwrap.dedent(
    """
    import importlib, pkgutil, sys

    import rooflint.kernels
    from rooflint.core.errors import VariantSkipped
    from rooflint.core.family import NEEDS_TRITON
    from rooflint.core.registry import family_names, get_family
    from rooflint.core.triton_compat import HAS_TRITON
    from rooflint.engine.worker import missing_requirement

    assert not HAS_TRITON and sys.modules["triton"] is None
    for module in pkgutil.walk_packages(rooflint.kernels.__path__, "rooflint.kernels."):
        if not module.name.startswith("rooflint.kernels.templates"):  # new-family's source, not importable as is
            importlib.import_module(module.name)  # every family package's implementations, and common/
    triton_rows = 0
    for name in family_names():
        for variant in get_family(name).variants.values():
            if NEEDS_TRITON in variant.needs:
                # On a GPU box without triton: skipped, and the reason says what to install.
                assert missing_requirement(variant, "cuda") == "needs the triton package", variant
                triton_rows += 1
    print("triton variants", triton_rows)
    import torch
    from rooflint.kernels.vector_add.triton import triton_add
    try:
        triton_add(torch.ones(4), torch.ones(4))
    except VariantSkipped as skipped:
        print("launch:", skipped)
    from typer.testing import CliRunner
    from rooflint.cli.app import app
    listed = CliRunner().invoke(app, ["list"])
    assert listed.exit_code == 0, listed.output
    assert "import failed" not in listed.output, listed.output
    print("listed", sum(name in listed.output for name in family_names()), "of", len(family_names()))
    """
)


def test_family_modules_import_and_list_without_triton(tmp_path):
    # sitecustomize runs before anything else: with sys.modules["triton"] = None every
    # "import triton" raises ImportError, as on a machine where triton is not installed.
    (tmp_path / "sitecustomize.py").write_text('import sys\nsys.modules["triton"] = None\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    env.pop(registry.PLUGIN_VARIABLE, None)
    result = subprocess.run(
        [sys.executable, "-c", NO_TRITON_CHECK], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    count = len(registry.family_names())
    assert f"listed {count} of {count}" in result.stdout
    assert "launch: needs the triton package" in result.stdout
    assert int(result.stdout.split("triton variants ")[1].split()[0]) >= 10
