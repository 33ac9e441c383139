"""`rooflint bench`'s run record and `rooflint profile`'s console, run as a user runs them (the
installed console script in a subprocess). Each case is a bug found that way:

- a bench whose every row was skipped (`-V triton,cuda` on a CPU), or whose variants were eager
  only, said "caches warm" in results.json and in its last line: Inductor's cache held entries and
  none was added, but no variant that compiles ever looked in it;
- `rooflint profile <family> --device cpu` printed Kineto's two `USDT:... profiler_start` /
  `profiler_stop` lines among its output.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from console_script import needs_console_script, run_in

QUICK_BENCH = ("bench", "vector_add", "--device", "cpu", "--size", "n=64", "--no-plots", "--out", "out")
QUICK_PROFILE = ("profile", "vector_add", "--device", "cpu", "--size", "n=64", "-V", "eager", "--out", "prof")


@pytest.fixture
def held_compile_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Triton's and Inductor's caches in tmp_path, each already holding an entry from an earlier run:
    a warm start, had anything compiled."""
    inductor, triton = tmp_path / "inductor", tmp_path / "triton"
    (inductor / "fxgraph" / "ab").mkdir(parents=True)
    (inductor / "fxgraph" / "ab" / "graph").write_text("compiled by an earlier run\n")
    (triton / "KERNELHASH").mkdir(parents=True)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton))
    return tmp_path


def _bench_record(folder: Path, *variants: str) -> tuple[dict, list[dict], str]:
    done = run_in(folder, *QUICK_BENCH, "-V", ",".join(variants))
    assert done.returncode == 0, done.stdout + done.stderr
    with (folder / "out" / "results.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    summary = [line for line in done.stdout.splitlines() if line.startswith("wall ")]
    assert len(summary) == 1, done.stdout
    return json.loads((folder / "out" / "results.json").read_text())["run"], rows, summary[0]


@needs_console_script
def test_a_bench_whose_every_row_skipped_does_not_call_the_caches_warm(held_compile_caches: Path) -> None:
    """Before: cache_state "warm" and "...; caches warm", the Inductor cache's state "warm"."""
    record, rows, summary = _bench_record(held_compile_caches, "triton", "cuda")
    assert {row["status"] for row in rows} == {"skipped"}
    caches = record["caches"]
    assert caches["inductor"]["entries_before"] == 1 and caches["triton"]["entries_before"] == 1
    assert {name: caches[name]["state"] for name in ("build", "triton", "inductor")} == dict.fromkeys(
        ("build", "triton", "inductor"), "unused"
    )
    assert record["cache_state"] == "unused"
    assert summary.endswith("; caches unused"), summary


@needs_console_script
def test_an_eager_only_bench_does_not_call_the_compile_caches_warm(held_compile_caches: Path) -> None:
    """An eager variant compiles nothing: the entries Inductor's and Triton's caches held were never
    read, and the run's state is the reference cache's alone. Before: both "warm", and the run "mixed"
    beside the reference cache's first store."""
    record, rows, _ = _bench_record(held_compile_caches, "eager")
    assert [row["status"] for row in rows] == ["ok"]
    caches = record["caches"]
    assert caches["inductor"]["entries_before"] == 1
    assert caches["inductor"]["state"] == caches["triton"]["state"] == "unused"
    assert record["cache_state"] == caches["reference"]["state"]


@needs_console_script
def test_profile_on_the_cpu_prints_no_kineto_usdt_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: stderr held `USDT:<time> <pid>:<tid> SyncActivityProfilerHandler.cpp:52] profiler_start`
    and its profiler_stop twin."""
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    done = run_in(tmp_path, *QUICK_PROFILE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "aten::add" in done.stdout
    assert "USDT:" not in done.stdout + done.stderr, done.stderr


@needs_console_script
def test_profile_drops_only_the_usdt_lines_from_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kineto's other lines (here its STAGE ones, which a user asks for with KINETO_LOG_LEVEL=3) still
    reach stderr: the USDT lines are filtered out, not stderr silenced."""
    monkeypatch.setenv("KINETO_LOG_LEVEL", "3")
    done = run_in(tmp_path, *QUICK_PROFILE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Completed Stage: Collection" in done.stderr, done.stderr
    assert "USDT:" not in done.stdout + done.stderr, done.stderr
