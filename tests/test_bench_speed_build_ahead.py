"""nvcc builds ahead: bench starts every library its variants will load, side by side, before the
rows need them; a variant then loads that same build (or waits for it), and the run clock counts
only the wait as "build". nvcc is replaced by a fake that writes the library file."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest

from rooflint.core import registry
from rooflint.core.errors import VariantSkipped
from rooflint.core.family import Family
from rooflint.core.registry import get_family
from rooflint.engine import bench, build_ahead, cuda_build
from rooflint.engine.request import BenchPlan, BenchRequest
from rooflint.engine.run_clock import PhaseClock, RunTally, run_record
from rooflint.engine.worker import Task, Worker

KERNELS = Path(build_ahead.__file__).resolve().parent.parent / "kernels"


class FakeNvcc:
    """Stands in for cuda_build.compile_source: writes the output, counts the compiles, and holds
    each one until ``release`` is set (so a test can make another caller wait for it)."""

    def __init__(self, fail: bool = False, hold: bool = False) -> None:
        self.compiled: list[tuple[str, str]] = []
        self.fail = fail
        self.started = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.lock = threading.Lock()
        self._starts = threading.Condition()
        self.starts = 0

    def wait_started(self, count: int, timeout: float) -> bool:
        """Whether ``count`` compiles have begun within ``timeout`` seconds."""
        with self._starts:
            return self._starts.wait_for(lambda: self.starts >= count, timeout)

    def __call__(self, source: Path, output: Path, arch, **_) -> None:
        self.started.set()
        with self._starts:
            self.starts += 1
            self._starts.notify_all()
        self.release.wait(5)
        with self.lock:
            self.compiled.append((source.name, arch))
        if self.fail:
            raise VariantSkipped(f"nvcc failed for {source.name} ({arch}): error: no")
        output.write_bytes(b"library")


@pytest.fixture
def nvcc(monkeypatch, tmp_path):
    monkeypatch.setenv("ROOFLINT_CACHE", str(tmp_path / "cache"))
    fake = FakeNvcc()
    monkeypatch.setattr(cuda_build, "compile_source", fake)
    monkeypatch.setattr(cuda_build, "nvcc_path", lambda: "/usr/bin/nvcc")
    monkeypatch.setattr(cuda_build, "BUILDS", cuda_build.BuildTally())
    return fake


def test_the_sources_are_those_the_selected_variants_declare():
    sources = build_ahead.sources_for
    assert sources([("softmax", "cuda"), ("softmax", "eager")]) == [KERNELS / "softmax" / "softmax.cu"]
    assert sources([("softmax", "eager"), ("rmsnorm", "triton")]) == []
    # Another family's source (layernorm_gelu builds layernorm.cu)...
    assert sources([("layernorm_gelu", "cuda")]) == [KERNELS / "layernorm" / "layernorm.cu"]
    # ...a CUDA kernel behind a Triton variant (the skinny GEMM's decode path), and one source for two
    # variants that load it, built once.
    assert sources([("gelu_linear", "triton"), ("weight_only_gemm", "bf16_skinny")]) == [
        KERNELS / "gelu_linear" / "skinny_pdl.cu",
        KERNELS / "gelu_linear" / "skinny_ring.cu",
    ]
    hopper = sources([("attention", "cuda_hopper")])
    assert hopper == [KERNELS / "attention" / "attention_hopper.cu"]


def test_a_variant_without_a_declaration_builds_on_first_use(monkeypatch, tmp_path):
    # A plugin's CUDA variant written before sources= existed: nothing ahead, and no error. One that
    # declares its source gets it built ahead; a declared file that is missing is left to its load.
    plugin = Family("plugin_scale", summary="x", sizes={"small": [{}], "large": [{}]}, make_inputs=None,
                    reference=None, cost=None)  # fmt: skip
    source = tmp_path / "plugin_scale.cu"
    source.write_text("// a plugin's kernel\n")
    plugin.variant("cuda", needs=("nvcc",))(lambda case: None)
    plugin.variant("cuda_declared", kind="cuda", sources=(str(source),))(lambda case: None)
    plugin.variant("cuda_missing", kind="cuda", sources=(tmp_path / "gone.cu",))(lambda case: None)
    monkeypatch.setattr(build_ahead, "get_family", lambda name: plugin)
    assert plugin.variants["cuda"].sources == ()
    assert build_ahead.sources_for([("plugin_scale", "cuda")]) == []
    assert build_ahead.sources_for([("plugin_scale", "cuda_declared")]) == [source]
    assert build_ahead.sources_for([("plugin_scale", "cuda_missing")]) == []
    with pytest.raises(ValueError, match="sources are .cu files, not .*plugin_scale.py"):
        plugin.variant("cuda_py", kind="cuda", sources=(tmp_path / "plugin_scale.py",))


def builtin_variants():
    """(family, variant) of every variant rooflint itself registers (plugins' are not held to this)."""
    return [
        (family.name, variant)
        for family in map(get_family, registry.family_names())
        for variant in family.variants.values()
        if variant.build.__module__.startswith("rooflint.")
    ]


def test_every_variant_declares_exactly_the_sources_its_code_loads():
    """The declaration against the builder's own code: every ``family_source(<module>.__file__,
    "name")`` it or the rooflint functions it names (imported on first use too) call, and every
    module constant holding such a path that they name. A CUDA variant
    that forgets sources=, declares a source it never loads, or declares a file not there fails."""
    wrong, found_any = [], 0
    for family, variant in builtin_variants():
        declared = set(variant.sources)
        loaded = set(sources_in_code(variant.build))
        found_any += bool(loaded)
        missing_files = sorted(str(path) for path in declared if not path.is_file())
        if declared != loaded or missing_files or (variant.kind == "cuda" and not declared):
            undeclared = sorted(f"{p.parent.name}/{p.name}" for p in loaded - declared)
            extra = sorted(f"{p.parent.name}/{p.name}" for p in declared - loaded)
            wrong.append(f"{family}/{variant.name}: undeclared {undeclared}, never loaded {extra}, "
                         f"missing files {missing_files}")  # fmt: skip
    assert not wrong, "\n".join(wrong)
    assert found_any >= 15  # the oracle reads the kernels' code (it is not an empty set on both sides)


def test_the_oracle_follows_names_across_modules():
    # What the declaration test relies on: a Triton variant reaches skinny_pdl.cu and skinny_ring.cu
    # through skinny_linear's imports on first use, and layernorm_gelu through another family's __file__.
    triton = get_family("gelu_linear").variants["triton"].build
    assert sources_in_code(triton) == [KERNELS / "gelu_linear" / name for name in ("skinny_pdl.cu", "skinny_ring.cu")]
    online = get_family("softmax").variants["cuda_online"].build
    assert [p.name for p in sources_in_code(online)] == ["softmax_online.cu", "softmax.cu"]
    assert sources_in_code(get_family("layernorm_gelu").variants["cuda"].build) == [
        KERNELS / "layernorm" / "layernorm.cu"
    ]
    assert sources_in_code(get_family("softmax").variants["eager"].build) == []


# The oracle: the .cu files a builder's code names, read from its source. Only the test reads code
# this way; build_ahead reads the declarations, which the test above holds to this.
def sources_in_code(builder) -> list[Path]:
    module = sys.modules[builder.__module__]
    return list(dict.fromkeys(_reached(module, builder.__name__, set())))


def _reached(module: ModuleType, name: str, seen: set[tuple[str, str]]) -> list[Path]:
    """Sources named in the top-level def or class ``name`` of ``module`` and in what it names."""
    if (module.__name__, name) in seen:
        return []
    seen.add((module.__name__, name))
    tree = ast.parse(inspect.getsource(module))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    node = next((n for n in tree.body if isinstance(n, kinds) and n.name == name), None)
    if node is None:
        return []
    # The body only: the decorator's sources=(family_source(...),) is the declaration under test.
    body = [child for statement in node.body for child in ast.walk(statement)]
    sources = [path for call in body if isinstance(call, ast.Call) if (path := _family_source(module, call))]
    named = _named(module, body)
    # A module's constant naming its .cu (``ROPE_CU = family_source(__file__, "rope")``), as loaded.
    sources += [value for value in named if isinstance(value, Path) and value.suffix == ".cu"]
    for target in named:
        if not (inspect.isfunction(target) or inspect.isclass(target)):
            continue
        owner = sys.modules.get(getattr(target, "__module__", "") or "")
        if owner is not None and owner.__name__.startswith("rooflint."):
            sources += _reached(owner, target.__name__, seen)
    return sources


def _named(module: ModuleType, body: list[ast.AST]) -> list:
    """What ``body`` names (``f``, ``module.f``), as the module binds it or as a ``from rooflint...
    import`` inside it does (a module imported on first use)."""
    bound = dict(vars(module))
    for child in body:
        if isinstance(child, ast.ImportFrom) and not child.level and (child.module or "").startswith("rooflint"):
            for alias in child.names:
                imported = importlib.import_module(child.module)
                try:
                    value = importlib.import_module(f"{child.module}.{alias.name}")
                except ImportError:
                    value = getattr(imported, alias.name, None)
                bound[alias.asname or alias.name] = value
    names = []
    for child in body:
        if isinstance(child, ast.Name):
            value = bound.get(child.id)
        elif isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name):
            value = getattr(bound.get(child.value.id), child.attr, None)
        else:
            continue
        if value is not None:
            names.append(value)
    return names


def _family_source(module: ModuleType, call: ast.Call) -> Path | None:
    """The path of a ``family_source(__file__ or <module>.__file__, "name")`` call; None for other calls."""
    called = call.func
    if (called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")) != "family_source":
        return None
    where = call.args[0]
    if isinstance(where, ast.Name) and where.id == "__file__":
        module_file = module.__file__
    elif isinstance(where, ast.Attribute) and where.attr == "__file__" and isinstance(where.value, ast.Name):
        module_file = getattr(vars(module).get(where.value.id), "__file__", None)
    else:
        return None
    name = call.args[1].value if len(call.args) > 1 and isinstance(call.args[1], ast.Constant) else None
    if len(call.args) > 1 and not isinstance(name, str):
        return None  # a name computed at run time: no declaration can be checked against it here
    return cuda_build.family_source(module_file, name) if module_file else None


def test_a_library_built_ahead_is_the_one_the_variant_loads(nvcc):
    source = KERNELS / "softmax" / "softmax.cu"
    ahead = build_ahead.BuildsAhead([source], ["sm_90a"])
    ahead.close()
    assert ahead.built == 1 and ahead.failed == 0 and ahead.seconds >= 0
    library, compiled = cuda_build.build(source, "sm_90a")  # what load() calls for this GPU
    assert library == cuda_build.library_path(source, "sm_90a") and library.is_file() and not compiled
    assert nvcc.compiled == [("softmax.cu", "sm_90a")]  # nvcc ran once, with the same arch


def test_builds_run_side_by_side_and_a_second_caller_waits_for_the_first(nvcc):
    nvcc.release.clear()
    sources = [KERNELS / "softmax" / "softmax.cu", KERNELS / "rmsnorm" / "rmsnorm.cu"]
    ahead = build_ahead.BuildsAhead(sources, ["sm_90a"], workers=4)
    # Both builds under way (each holding its library's lock), so the caller below can only wait:
    # had it come before the second pool thread took softmax's lock, it would have built softmax itself.
    assert nvcc.wait_started(2, 5)
    waiting = threading.Thread(target=cuda_build.build, args=(sources[0], "sm_90a"))
    waiting.start()  # a variant's load of a library being built ahead
    time.sleep(0.05)
    assert waiting.is_alive() and not cuda_build.library_path(sources[0], "sm_90a").exists()
    nvcc.release.set()
    waiting.join(5)
    ahead.close()
    assert sorted(nvcc.compiled) == [("rmsnorm.cu", "sm_90a"), ("softmax.cu", "sm_90a")]
    assert ahead.built == 2 and cuda_build.BUILDS.built == 0  # this thread waited, built nothing


def test_a_failed_build_ahead_leaves_the_variant_to_build_and_report_it(nvcc):
    nvcc.fail = True
    source = KERNELS / "softmax" / "softmax.cu"
    ahead = build_ahead.BuildsAhead([source], ["sm_80"])
    ahead.close()
    assert ahead.built == 0 and ahead.failed == 1
    with pytest.raises(VariantSkipped, match="nvcc failed for softmax.cu"):
        cuda_build.build(source, "sm_80")


def test_nothing_starts_on_a_cpu_without_nvcc_or_without_nvml(nvcc, monkeypatch):
    pairs = [("softmax", "cuda")]
    assert build_ahead.start(pairs, "cpu", [None]).futures == []
    monkeypatch.setattr(build_ahead, "gpu_archs", lambda indices: [])
    assert build_ahead.start(pairs, "cuda", [None]).futures == []
    monkeypatch.setattr(build_ahead, "gpu_archs", lambda indices: ["sm_90a"])
    monkeypatch.setattr(cuda_build, "nvcc_path", lambda: None)
    assert build_ahead.start(pairs, "cuda", [None]).futures == []
    assert nvcc.compiled == []


def test_the_pool_leaves_half_the_cores_to_the_measuring():
    assert build_ahead.pool_size(15, cpus=16) == 8
    assert build_ahead.pool_size(2, cpus=16) == 2
    assert build_ahead.pool_size(15, cpus=2) == 1


class FirstCalls:
    """Just what Worker._first_calls needs of a worker."""

    def __init__(self) -> None:
        self.clock = PhaseClock()


def test_the_run_clock_counts_a_wait_on_a_build_ahead_as_build(nvcc):
    nvcc.release.clear()
    source = KERNELS / "rmsnorm" / "rmsnorm.cu"
    ahead = build_ahead.BuildsAhead([source], ["sm_90a"])
    assert nvcc.started.wait(5)
    threading.Timer(0.2, nvcc.release.set).start()
    worker = FirstCalls()
    with Worker._first_calls(worker):
        cuda_build.build(source, "sm_90a")  # waits for the build ahead
        time.sleep(0.05)  # the variant's first call
    ahead.close()
    report = worker.clock.take()
    assert report["phases_s"]["build"] >= 0.1  # the wait
    assert 0.04 <= report["phases_s"]["compile"] < report["phases_s"]["build"]
    assert "build_added" not in report["counts"]  # bench built it, and counts it


def test_a_variant_that_builds_itself_counts_its_build(nvcc):
    worker = FirstCalls()
    with Worker._first_calls(worker):
        cuda_build.build(KERNELS / "gelu" / "gelu.cu", "sm_90a")
    report = worker.clock.take()
    assert report["counts"]["build_added"] == 1 and report["phases_s"]["build"] > 0


def test_bench_builds_ahead_and_its_record_keeps_the_builds_apart_from_the_phases(nvcc, monkeypatch, tmp_path):
    monkeypatch.setattr(build_ahead, "gpu_archs", lambda indices: ["sm_90a"])
    tasks = [Task("softmax", name, "bf16", "large", {"rows": 8, "cols": 8}) for name in ("eager", "cuda")]
    plan = BenchPlan(BenchRequest(device="cuda", out=tmp_path), tasks)
    tally = RunTally()
    ahead = bench.start_builds(plan, tally)
    ahead.close()
    tally.builds_ahead(ahead.built, ahead.seconds)
    tally.worker_started()
    tally.add({"phases_s": {"measure": 1.0}, "cache_entries": {"build": 1, "triton": 0, "inductor": 0}})
    record = run_record(tally, "a", "b", 2.0, reference_cache=True, rows=2)
    build = record["caches"]["build"]
    # The build cache was empty when bench looked, whatever the worker saw after the build ahead.
    assert build["entries_before"] == 0 and build["added"] == 1 and build["state"] == "cold"
    assert build["built_ahead"] == 1 and build["ahead_s"] >= 0
    assert sum(record["phases_s"].values()) + record["other_s"] == pytest.approx(2.0)
    assert nvcc.compiled == [("softmax.cu", "sm_90a")]


def test_a_remote_fleet_builds_nothing_here(nvcc, monkeypatch, tmp_path):
    monkeypatch.setattr(build_ahead, "gpu_archs", lambda indices: ["sm_90a"])
    plan = BenchPlan(BenchRequest(device="cuda", scheduler="tcp://gpu-host:8786", out=tmp_path), [])
    assert bench.start_builds(plan, RunTally()).futures == []


def test_defines_key_their_own_library_and_reach_nvcc(nvcc, monkeypatch):
    # A config's -D meta-parameters (cuda_hopper's CONSUMERS_D64) build a library of their own, and
    # no defines keeps the key every default build (and every build ahead) has.
    source = KERNELS / "attention" / "attention_hopper.cu"
    two = (("ROOFLINT_FA3_CONSUMERS_D64", 2),)
    plain, _ = cuda_build.build(source, "sm_90a")
    defined, compiled = cuda_build.build(source, "sm_90a", two)
    assert compiled and defined != plain and defined == cuda_build.library_path(source, "sm_90a", two)
    assert cuda_build.library_path(source, "sm_90a", ()) == plain
    command = cuda_build.compile_command(source, Path("out.so"), "sm_90a", defines=two)
    assert "-DROOFLINT_FA3_CONSUMERS_D64=2" in command and command.index(
        "-DROOFLINT_FA3_CONSUMERS_D64=2"
    ) < command.index(str(source))


def test_cuda_hopper_takes_its_defines_as_an_ab_config():
    from rooflint.core.registry import get_family
    from rooflint.engine.ab.configs import checked_config

    build = get_family("attention").variants["cuda_hopper"].build
    assert checked_config("attention", "cuda_hopper", build, {"CONSUMERS_D64": 2})["CONSUMERS_D64"] == 2
    with pytest.raises(Exception, match="no meta-parameter BLOCK_M; valid: CONSUMERS_D64"):
        checked_config("attention", "cuda_hopper", build, {"BLOCK_M": 64})
