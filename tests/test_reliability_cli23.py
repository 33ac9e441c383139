"""compare's heading under --fail-on-missing, report's tables and labels for a merge of event-timed and
graph-timed runs, ROOFLINT_HOST on a plain bench, and the environment a local fleet measures in: run
as a user runs them, through the installed console script.

Before: `compare --fail-on-missing` exited 1 under a heading that said "pass"; a report of a merged
`--cuda-graphs` run and event-timed run listed each variant twice with nothing telling the two lines
apart (and its across-GPU table set one GPU's graph replay beside another's event-timed call, the
event-timed row dropped); ROOFLINT_HOST named the host of a `--scheduler local` run's rows but not a
plain bench's on the same machine; and a local fleet's CPU rows ran with Dask's OMP_NUM_THREADS=1 and
MALLOC_TRIM_THRESHOLD_, at up to 11x a plain bench's time for the same code on the same machine; an
on/off switch set to neither 0 nor 1 (`ROOFLINT_PDL=yes`) quietly meant its default, and
`ROOFLINT_DEBUG=0` turned tracebacks on.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import cpu_ceilings
import pytest
from console_script import ROOFLINT, assert_refused, needs_console_script, run_in
from result_factory import read_csv, run, write

from rooflint.core.switches import SWITCHES

pytestmark = needs_console_script


def graphed(rows):
    """The rows as `bench --cuda-graphs` times them: a quarter of the time, timing_mode cuda_graph."""
    for item in rows:
        item.timing_mode, item.l2_flushed = "cuda_graph", False
        item.median_ms, item.p20_ms, item.p80_ms = item.median_ms / 4, item.p20_ms / 4, item.p80_ms / 4
        # Its rates with it: a rate its row's cost and time do not give is refused by every reader.
        item.achieved_tflops, item.achieved_gbps = item.achieved_tflops * 4, item.achieved_gbps * 4
    return rows


def burst(rows):
    for item in rows:
        item.regime = "burst"  # as bench writes every timed row
    return rows


def rooflint_with(folder: Path, env: dict[str, str], *argv) -> subprocess.CompletedProcess:
    """run_in with ``env`` added to the caller's environment."""
    full = dict(os.environ, ROOFLINT_CACHE=str(folder / "cache"), COLUMNS="200")
    cpu_ceilings.seed(full["ROOFLINT_CACHE"])
    for name in ("ROOFLINT_DEBUG", "ROOFLINT_FAMILY_MODULES", "ROOFLINT_HOST"):
        full.pop(name, None)
    full.update(env)
    return subprocess.run(
        [ROOFLINT, *map(str, argv)], capture_output=True, text=True, timeout=300, cwd=folder, env=full, check=False
    )


def test_compare_fail_on_missing_says_fail_in_its_heading(tmp_path):
    base = write(run(), tmp_path / "base")
    new = write(run()[:2], tmp_path / "new")  # softmax not run: its two rows only in BASE
    done = run_in(tmp_path, "compare", base, new, "--fail-on-missing", "--out", tmp_path / "diff.md")
    assert done.returncode == 1, done.stdout + done.stderr
    heading = done.stdout.splitlines()[0]
    assert heading.startswith("## rooflint compare: FAIL") and "2 rows only in BASE" in heading, heading
    assert (tmp_path / "diff.md").read_text().splitlines()[0] == heading
    plain = run_in(tmp_path, "compare", base, new)  # without the flag: listed, not failed, and said so
    assert plain.returncode == 0 and plain.stdout.startswith("## rooflint compare: pass"), plain.stdout


def test_report_tells_a_graph_timed_row_from_an_event_timed_one(tmp_path):
    events, graphs = write(burst(run()), tmp_path / "events"), write(burst(graphed(run())), tmp_path / "graphs")
    merged = tmp_path / "merged.csv"
    assert run_in(tmp_path, "merge", events, graphs, "--out", merged).returncode == 0
    done = run_in(tmp_path, "report", merged)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    table = text.split("### vector_add")[1].split("###")[0]
    assert "| variant | timing_mode |" in table, table
    assert "| eager | cuda_events | 0.6 |" in table and "| eager | cuda_graph | 0.15 |" in table, table
    legend = [line.split(":")[0][3:] for line in text.splitlines() if line[:1].isupper() and line[1:3] == "  "]
    assert len(legend) == 8 and len(set(legend)) == 8, legend  # every point's label its own
    assert "vector_add/eager bf16 (CUDA graphs)" in legend, legend


def test_report_across_gpus_never_sets_a_graph_replay_beside_an_event_timed_call(tmp_path):
    rows = burst(run()[:1] + graphed(run()[:1]) + run(gpu="a100_80gb_sxm")[:1])  # vector_add eager
    results = write(rows, tmp_path / "two")
    done = run_in(tmp_path, "report", results, "--format", "json")
    assert done.returncode == 0, done.stderr
    lines = {item["cuda_graphs"]: item["by_gpu"] for item in json.loads(done.stdout)["across_gpus"]}
    assert lines[False]["h100_sxm"]["median_ms"] == 0.6 and lines[False]["a100_80gb_sxm"]["median_ms"] == 0.6
    assert lines[True]["h100_sxm"]["median_ms"] == 0.15 and "a100_80gb_sxm" not in lines[True], lines
    md = run_in(tmp_path, "report", results).stdout
    assert "| vector_add | eager | bf16 | `n=268435456` | yes |  | 0.15 (80%) |" in md, md


def test_rooflint_host_names_a_plain_bench_s_rows_as_a_fleet_s(tmp_path):
    argv = ("bench", "vector_add", "--device", "cpu", "--size", "small", "--variants", "eager,triton", "--no-plots")
    done = rooflint_with(tmp_path, {"ROOFLINT_HOST": "node7"}, *argv)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = read_csv(tmp_path / "rooflint-out" / "results.csv")
    assert [(r["variant"], r["status"], r["host"]) for r in rows] == [
        ("eager", "ok", "node7"),
        ("triton", "skipped", "node7"),
    ]


ENV_FAMILY = '''
"""A family whose one variant notes the environment it is timed in."""

import os

import torch

from rooflint.core.family import Cost, Family, randn

NAMES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MALLOC_TRIM_THRESHOLD_")

FAMILY = Family(
    "envprobe",
    summary="y = 2x, noting its environment",
    sizes={"small": [{"n": 4096}], "large": [{"n": 4096}]},
    make_inputs=lambda params, dtype, device, generator: {"x": randn([params["n"]], dtype, device, generator)},
    reference=lambda inputs, params: inputs["x"].double() * 2,
    cost=lambda params, dtype: Cost(cuda_flops=params["n"], bytes=2 * params["n"] * 4),
    dtypes=("fp32",),
)


@FAMILY.variant("eager")
def eager(case):
    x = case["x"]
    run = lambda: x * 2  # noqa: E731
    seen = [f"{name}={os.environ.get(name, '-')}" for name in NAMES]
    run.note = " ".join(seen + [f"threads={torch.get_num_threads()}"])
    return run
'''


@pytest.mark.xdist_group("fleet_console")
def test_a_local_fleet_measures_in_the_environment_a_plain_bench_does(tmp_path):
    pytest.importorskip("distributed", reason="--scheduler needs the rooflint[dask] extra")
    (tmp_path / "envprobe.py").write_text(textwrap.dedent(ENV_FAMILY))
    env = {
        "ROOFLINT_FAMILY_MODULES": "envprobe",
        "PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    argv = ("bench", "envprobe", "--device", "cpu", "--size", "small", "--no-plots")
    notes = []
    for out, fleet in (("plain", ()), ("fleet", ("--scheduler", "local"))):
        done = rooflint_with(tmp_path, env, *argv, "--out", out, *fleet)
        assert done.returncode == 0, done.stdout + done.stderr
        rows = read_csv(tmp_path / out / "results.csv")
        assert [r["status"] for r in rows] == ["ok"], rows
        notes.append(rows[0]["message"])
    assert notes[0] == notes[1], notes


SWITCH_NAMES = [name for name in SWITCHES if name != "ROOFLINT_DEBUG"]  # every one rooflint reads


@pytest.mark.parametrize("name", [*SWITCH_NAMES, "ROOFLINT_DEBUG"])
def test_an_on_off_switch_that_is_neither_0_nor_1_is_refused_at_start(tmp_path, name):
    """`ROOFLINT_PDL=yes` quietly meant the default (and `ROOFLINT_DEBUG=0` turned tracebacks on):
    the run measured something other than what was asked for. Each switch takes 0 or 1, or unset."""
    env = dict(os.environ, ROOFLINT_CACHE=str(tmp_path / "cache"), COLUMNS="200")
    for value, refused in (("yes", True), ("false", True), ("0", False), ("1", False), ("", False)):
        env[name] = value
        done = subprocess.run(
            [ROOFLINT, "--version"], capture_output=True, text=True, env=env, cwd=tmp_path, check=False
        )
        if refused:
            assert_refused(done, f"{name}={value!r} is not a switch", "valid: 0 or 1")
        else:
            assert done.returncode == 0, done.stdout + done.stderr


def test_debug_0_keeps_the_one_line_error(monkeypatch):
    """ROOFLINT_DEBUG=0 means off: an unexpected error is still one line, exit 1, no traceback."""
    from rooflint.cli import app as app_module

    def broken(**_kwargs):
        raise RuntimeError("a kernel's own error")

    monkeypatch.setenv("ROOFLINT_DEBUG", "0")
    monkeypatch.setattr(app_module, "app", broken)
    monkeypatch.setattr(app_module.sys, "argv", ["rooflint", "list"])
    with pytest.raises(SystemExit) as stopped:
        app_module.main()
    assert stopped.value.code == 1
