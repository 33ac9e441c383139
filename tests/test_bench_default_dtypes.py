"""bench without --dtype: bf16 for every family that has it, and a quantized family's own formats, so
one `rooflint bench all` covers scaled_gemm and weight_only_gemm too; an explicit --dtype is unchanged.
Rows of several dtypes in one run keep their baselines, comparisons and report speedups apart."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from rooflint.analysis.compare import compare_frames
from rooflint.core.errors import UserError
from rooflint.core.family import Cost, Family
from rooflint.core.registry import get_family, resolve_families
from rooflint.core.selection import select_dtypes
from rooflint.core.specs import measured_spec
from rooflint.engine.bench import plan, prepare
from rooflint.engine.fleet.groups import case_key, plan_groups
from rooflint.engine.request import BenchRequest
from rooflint.engine.timing import summarize
from rooflint.engine.worker import Worker
from rooflint.outputs.report import build_report

QUANTIZED_DEFAULTS = {"scaled_gemm": {"fp8_e4m3", "int8"}, "weight_only_gemm": {"w8a16", "wfp8a16"}}
CPU = measured_spec("cpu", "CPU (measured)", 20.0, {"cuda_fp32_tflops": 0.5}, "measured at start")


def _plan(families, dtypes=(), size="small", variants=()):
    return plan(BenchRequest(families=families, dtypes=list(dtypes), variants=list(variants), size=size, device="cpu"))


def _dtypes_by_family(tasks) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for task in tasks:
        found.setdefault(task.family, set()).add(task.dtype)
    return found


def test_bench_all_without_dtype_adds_the_quantized_families_and_leaves_the_bf16_rows_as_they_were():
    default = _plan(["all"], size="large")
    found = _dtypes_by_family(default)
    assert {name: found[name] for name in QUANTIZED_DEFAULTS} == QUANTIZED_DEFAULTS
    assert all(dtypes == {"bf16"} for name, dtypes in found.items() if name not in QUANTIZED_DEFAULTS)
    # Every float family's rows are those of `--dtype bf16`, in the same order ...
    assert [t for t in default if t.family not in QUANTIZED_DEFAULTS] == _plan(["all"], ["bf16"], size="large")
    # ... and the new rows come in their family's place: each family whole, in the registry's order.
    runs = [t.family for i, t in enumerate(default) if i == 0 or default[i - 1].family != t.family]
    assert runs == [name for name in resolve_families(["all"]) if name in found]


def test_the_default_large_run_holds_issue_44_targets():
    tasks = _plan(["scaled_gemm", "weight_only_gemm"], size="large")
    square = {"m": 8192, "k": 8192, "n": 8192}
    fp8_square = {t.variant for t in tasks if t.dtype == "fp8_e4m3" and square.items() <= t.params.items()}
    assert {"eager", "triton", "cuda"} <= fp8_square  # eager: torch._scaled_mm, the bar to meet
    assert any(t.dtype == "int8" and t.variant == "triton" for t in tasks)
    for dtype in ("w8a16", "wfp8a16"):
        shapes = {
            variant: {(t.params["k"], t.params["m"]) for t in tasks if t.dtype == dtype and t.variant == variant}
            for variant in ("triton", "bf16_skinny")
        }
        assert shapes["triton"] == shapes["bf16_skinny"]
        assert {(768, 1), (2048, 1)} <= shapes["triton"]  # GPT-2's and Llama-3.2-1B's hidden size, one sequence


def test_an_explicit_dtype_runs_only_the_families_that_have_it_in_the_order_asked():
    assert not set(_dtypes_by_family(_plan(["all"], ["bf16"]))) & set(QUANTIZED_DEFAULTS)
    assert _dtypes_by_family(_plan(["softmax", "scaled_gemm"], ["bf16", "fp8_e5m2"])) == {
        "softmax": {"bf16"},
        "scaled_gemm": {"fp8_e5m2"},
    }
    asked = [t.dtype for t in _plan(["softmax"], ["bf16", "fp16"])]
    assert asked == sorted(asked, key=["bf16", "fp16"].index) and set(asked) == {"bf16", "fp16"}


def test_prepare_leaves_the_dtype_to_each_family_and_says_so_when_nothing_runs(tmp_path):
    planned = prepare(BenchRequest(families=["scaled_gemm", "vector_add"], device="cpu", out=tmp_path / "a"))
    assert planned.request.dtypes == []
    assert _dtypes_by_family(planned.tasks) == {"scaled_gemm": {"fp8_e4m3", "int8"}, "vector_add": {"bf16"}}
    # gelu_linear's fp8 variant runs only in fp8, and the family's default dtype is bf16: the dtypes say why.
    with pytest.raises(UserError, match=r"\(each family's defaults\); these families run --dtype fp16, bf16, fp8_e4m3"):
        _plan(["gelu_linear"], variants=["triton_fp8"])
    # vector_add has no library variant at all: that is said, not the dtypes.
    with pytest.raises(UserError, match=r"vector_add has no variant library \(by name or kind\); valid here: compile"):
        _plan(["vector_add"], variants=["library"])


def test_a_fleet_cuts_a_run_of_several_dtypes_into_one_dtype_cases_each_with_its_baseline():
    tasks = _plan(["scaled_gemm", "weight_only_gemm"], size="large")
    groups = plan_groups(tasks, seconds=lambda task: 1.0, workers=4)
    assert sorted(t.key for g in groups for t in g.tasks) == sorted(t.key for t in tasks)  # each task once
    for group in groups:
        assert len({case_key(task) for task in group.tasks}) == 1  # one family, dtype and shape
    baselines = {case_key(t) for t in tasks if t.variant == get_family(t.family).baseline.name}
    assert baselines == {case_key(t) for t in tasks}  # every dtype's every shape has its own baseline


def _family(dtypes, default_dtypes=None) -> Family:
    return Family(
        "toy_defaults",
        summary="",
        sizes={"small": [{"n": 1}], "large": [{"n": 2}]},
        make_inputs=lambda params, dtype, device, generator: {},
        reference=lambda inputs, params: None,
        cost=lambda params, dtype: Cost(),
        dtypes=dtypes,
        default_dtypes=default_dtypes,
    )


def test_a_family_defaults_to_bf16_else_its_first_dtype_else_what_it_declares():
    assert select_dtypes(_family(("fp32", "fp16", "bf16"))) == ("bf16",)
    assert select_dtypes(_family(("fp32",))) == ("fp32",)
    assert select_dtypes(_family(("fp8_e4m3", "int8"), ("int8",))) == ("int8",)
    assert select_dtypes(_family(("fp8_e4m3", "int8"), ("int8",)), ["fp8_e4m3", "bf16"]) == ("fp8_e4m3",)
    with pytest.raises(ValueError, match="default_dtypes .* must be some of its dtypes"):
        _family(("fp8_e4m3",), ("bf16",))


def _timer_saying(medians_ms):
    """A timer that runs the kernel once and reports the next of ``medians_ms`` as its median: the
    rows' times are then known, and the checks run on the real kernels."""
    medians = iter(medians_ms)

    def timer(fn, *, nvtx_name, sampler):
        with sampler.record() as recording:
            fn()
        return dataclasses.replace(summarize([next(medians)] * 10, "cpu_wall", False), telemetry=recording.telemetry)

    return timer


def test_a_default_cpu_run_of_scaled_gemm_keeps_each_dtype_apart_in_rows_comparisons_and_the_report():
    tasks = _plan(["scaled_gemm"], size="m=16,k=32,n=16", variants=["eager", "eager_unfused"])
    worker = Worker("cpu", CPU, timer=_timer_saying([2.0, 5.0, 1.0, 4.0]))
    rows = [worker.run(task) for task in tasks]
    assert [(r.variant, r.dtype, r.status) for r in rows] == [
        (variant, dtype, "ok") for dtype in ("fp8_e4m3", "int8") for variant in ("eager", "eager_unfused")
    ]
    # Each dtype's speedup is over its own baseline: int8's unfused row is 1/4, not fp8's eager 2 ms / 4.
    assert [r.speedup_vs_eager for r in rows] == [1.0, 0.4, 1.0, 0.25]

    frame = pd.DataFrame([dataclasses.asdict(r) for r in rows])
    unrecorded = frame.assign(speedup_vs_eager=math.nan)  # the report computes it per family, dtype and shape
    (family,) = build_report(unrecorded)["gpus"][0]["families"]
    assert [r["speedup_vs_eager"] for r in family["rows"]] == [1.0, 0.4, 1.0, 0.25]

    slower = frame.copy()
    int8_eager = (slower["dtype"] == "int8") & (slower["variant"] == "eager")
    for column in ("median_ms", "p20_ms", "p80_ms"):
        slower.loc[int8_eager, column] *= 3
    changed = {(e.variant, e.dtype) for e in compare_frames(frame, slower).regressions}
    assert changed == {("eager", "int8")}
