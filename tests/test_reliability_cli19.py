"""`rooflint bench`'s options beside --size and `rooflint model`'s sizes, run as a user runs them (the
installed console script in a subprocess). Each case is a bug found that way:

- `bench --dtype all,fp32` (or "all" twice) was refused as "unknown dtype 'all'", a name --help
  lists as valid; now "all" beside other names runs every dtype, as `bench all softmax` runs every
  family;
- --junit naming a file the run keeps or draws in its --out folder (results.prev.csv/.json, the
  rooflines) passed with exit 0: the last run's rows were replaced by the XML, or the JUnit report
  by the roofline written after it;
- `model` with a --seq, --prompt + --new-tokens or a sweep's --context past the model's positions
  was refused only after the model was built (minutes for an 8B model on a CPU), under a "building"
  line saying it had started;
- a reference cache that could not be written because ROOFLINT_CACHE names a file crashed every row
  whose reference was stored ("Not a directory" raised by the cleanup of the failed write), exit 1,
  where a cache that cannot be written was meant to cost the next run a recompute, never this run.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from console_script import assert_refused, needs_console_script, run_in
from tiny_llama import TINY_LLAMA

QUICK_BENCH = ("bench", "softmax", "--device", "cpu", "-V", "eager", "--no-plots")
MODEL_SIZES = {"--batch": "2", "--seq": "16", "--prompt": "8", "--new-tokens": "4"}


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@needs_console_script
@pytest.mark.parametrize("dtypes", ["all,fp32", "all,all"])
def test_dtype_all_beside_other_names_runs_every_dtype(tmp_path: Path, dtypes: str) -> None:
    """Before: `--dtype all,fp32` and `--dtype all,all` exit 2, "unknown dtype 'all'"."""
    done = run_in(tmp_path, *QUICK_BENCH, "--dtype", dtypes, "--out", "out")
    assert done.returncode == 0, done.stdout + done.stderr
    measured = [row["dtype"] for row in _rows(tmp_path / "out" / "results.csv")]
    assert sorted(measured) == ["bf16", "fp16", "fp32"]  # softmax's dtypes on a CPU, each once


@needs_console_script
@pytest.mark.parametrize(
    "name", ["results.prev.csv", "results.prev.json", "roofline.csv", "roofline.png", "roofline-cpu.prev.svg"]
)
def test_junit_over_a_file_the_run_keeps_is_refused(tmp_path: Path, name: str) -> None:
    """Before: exit 0, the file replaced by the JUnit XML (the last run's rows gone) or the JUnit
    report replaced by the roofline drawn after it."""
    out = tmp_path / "out"
    out.mkdir()
    kept = out / name
    kept.write_text("the last run's\n")
    done = run_in(tmp_path, *QUICK_BENCH, "--out", "out", "--junit", f"out/{name}")
    assert_refused(done, f"--junit out/{name}", f"own {name}", "another name")
    assert kept.read_text() == "the last run's\n"
    assert not (out / "results.csv").exists()


@needs_console_script
def test_junit_beside_the_results_is_still_written(tmp_path: Path) -> None:
    """The refusal above is for the run's own files only: a junit.xml in --out is written."""
    done = run_in(tmp_path, *QUICK_BENCH, "--out", "out", "--junit", "out/junit.xml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "out" / "junit.xml").read_text().startswith("<?xml")


def _tiny_llama(folder: Path) -> Path:
    (folder / "m").mkdir()
    config = folder / "m" / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    return config


@needs_console_script
@pytest.mark.parametrize(
    ("sizes", "expected"),
    [
        (("--seq", "100"), "--seq (100)"),
        (("--prompt", "60", "--new-tokens", "10"), "--new-tokens (70)"),
        (("--batch", "1,2", "--context", "100"), "context 100 + 8 steps"),
    ],
)
def test_model_past_its_positions_is_refused_before_building(tmp_path: Path, sizes, expected: str) -> None:
    """Before: "building m/config.json m (bf16, cpu)" on stderr, the model built, then the refusal."""
    _tiny_llama(tmp_path)
    given = {**MODEL_SIZES, **dict(zip(sizes[::2], sizes[1::2], strict=True))}
    argv = [item for pair in given.items() for item in pair]
    done = run_in(tmp_path, "model", "m/config.json", "--device", "cpu", "--no-plots", *argv, "--out", "out")
    assert_refused(done, "64 positions", expected)
    assert not (tmp_path / "out").exists()


def test_reference_cache_under_a_file_costs_a_store_not_the_row(tmp_path: Path) -> None:
    """Before: store() raised NotADirectoryError from its cleanup (the row crashed) where ROOFLINT_CACHE
    names a file; now it answers False and the run goes on."""
    import torch

    from rooflint.engine.reference_cache import ReferenceCache

    (tmp_path / "cache").write_text("not a folder")
    cache = ReferenceCache(tmp_path / "cache" / "references")
    assert cache.store("key", torch.ones(3)) is False
    assert cache.load("key", "cpu") is None
