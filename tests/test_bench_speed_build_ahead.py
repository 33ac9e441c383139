"""nvcc builds ahead: bench starts every library its variants will load, side by side, before the
rows need them; a variant then loads that same build (or waits for it), and the run clock counts
only the wait as "build". nvcc is replaced by a fake that writes the library file."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from rooflint.core.errors import VariantSkipped
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

    def __call__(self, source: Path, output: Path, arch, **_) -> None:
        self.started.set()
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


def test_the_sources_are_those_the_selected_variants_can_reach():
    sources = build_ahead.sources_for
    assert sources([("softmax", "cuda"), ("softmax", "eager")]) == [KERNELS / "softmax" / "softmax.cu"]
    assert sources([("softmax", "eager"), ("rmsnorm", "triton")]) == []
    # Through another module's __file__ (layernorm_gelu builds layernorm.cu)...
    assert sources([("layernorm_gelu", "cuda")]) == [KERNELS / "layernorm" / "layernorm.cu"]
    # ...and a module a function imports on first use (the Triton GEMM's CUDA decode path).
    assert KERNELS / "gelu_linear" / "skinny_pdl.cu" in sources([("gelu_linear", "triton")])
    hopper = sources([("attention", "cuda_hopper")])
    assert hopper == [KERNELS / "attention" / "attention_hopper.cu"]


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
    assert nvcc.started.wait(5)
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
