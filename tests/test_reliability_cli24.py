"""`rooflint bench`'s option combinations and `--spec-file` contents, run as a user runs them (the
installed console script in a subprocess). Each case is a bug found that way:

- `bench --dtype all,fp33` ran every dtype and exited 0: the names beside "all" were never checked,
  so a typo passed unseen;
- a spec file's inline table with a key rooflint does not read (`unit = "TB/s"`, `sorce = ...`) was
  dropped unread: `{ value = 3.35, unit = "TB/s" }` became a 3.35 GB/s roof, exit 0;
- a run after one drawn with --no-plots kept the rooflines of the run before that as roofline.prev.*,
  beside results.prev.* of other numbers;
- `bench --cuda-graphs` on the CPU wrote `"cuda_graphs": true` in results.json's measure record,
  over rows that no graph replayed (timing_mode cpu_wall).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from console_script import assert_refused, needs_console_script, run_in

QUICK_BENCH = ("bench", "vector_add", "--device", "cpu", "--size", "n=64", "-V", "eager", "--no-plots")


@needs_console_script
def test_a_dtype_beside_all_is_still_checked(tmp_path: Path) -> None:
    """Before: exit 0, every dtype measured, the typo unmentioned."""
    done = run_in(tmp_path, *QUICK_BENCH, "--dtype", "all,fp33", "--out", "out")
    assert_refused(done, "unknown dtype 'fp33'", "valid: fp32")
    assert not (tmp_path / "out" / "results.csv").exists()


@needs_console_script
def test_a_spec_file_value_with_a_key_rooflint_does_not_read_is_refused(tmp_path: Path) -> None:
    """Before: exit 0, the bandwidth shown as 3.35 (GB/s), the unit dropped."""
    spec = tmp_path / "mygpu.toml"
    spec.write_text(
        "[mygpu]\n"
        'match = ["MyGPU"]\n'
        'memory_bandwidth_gbps = { value = 3.35, unit = "TB/s", source = "datasheet" }\n'
        "cuda_fp32_tflops = 60\n"
    )
    done = run_in(tmp_path, "specs", "mygpu", "--spec-file", spec)
    assert_refused(done, "[mygpu] memory_bandwidth_gbps", "unknown key unit", "valid: value, source")


@needs_console_script
def test_the_rooflines_of_the_run_before_the_last_do_not_stay_as_prev(tmp_path: Path) -> None:
    """The last run drew none (--no-plots): before, roofline.prev.png of the run before it stayed beside
    the last run's results.prev.csv."""
    out = tmp_path / "out"
    out.mkdir()
    header = "family,variant,dtype\n"
    (out / "results.csv").write_text(header + "vector_add,eager,bf16\n")  # the last run's (no plots)
    (out / "roofline.prev.png").write_text("the run before the last\n")
    (out / "roofline-h100_sxm.prev.csv").write_text("the run before the last\n")
    done = run_in(tmp_path, *QUICK_BENCH, "--out", "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "results.prev.csv").read_text() == header + "vector_add,eager,bf16\n"
    assert sorted(path.name for path in out.glob("roofline*")) == []


@needs_console_script
def test_cuda_graphs_on_the_cpu_is_not_recorded_as_used(tmp_path: Path) -> None:
    """Before: results.json's run.measure said cuda_graphs true; the rows say cpu_wall."""
    done = run_in(tmp_path, *QUICK_BENCH, "--cuda-graphs", "--out", "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--cuda-graphs does nothing on the CPU" in done.stderr
    record = json.loads((tmp_path / "out" / "results.json").read_text())
    with (tmp_path / "out" / "results.csv").open(newline="") as handle:
        modes = {row["timing_mode"] for row in csv.DictReader(handle)}
    assert modes == {"cpu_wall"}
    assert record["run"]["measure"]["cuda_graphs"] is False


@needs_console_script
def test_a_variant_the_named_family_lacks_is_named_not_blamed_on_the_dtypes(tmp_path):
    """`-V eager_unfused` is a kind other families have, not vector_add: the refusal said no family
    supports "the requested variants and dtypes" and listed dtypes, the flag that was not wrong."""
    done = run_in(tmp_path, "bench", "vector_add", "-V", "eager_unfused", "--device", "cpu", "--out", "out")
    assert_refused(done, "vector_add has no variant eager_unfused", "valid here: compile, cuda, eager, triton")


@needs_console_script
@pytest.mark.parametrize(
    ("field", "said"),
    [
        ("sm_count = 1.5", "sm_count 1.5 is not a whole number of SMs"),
        ('l2_mib = { value = 50, source = "x", halved_from_sparse = true }', "l2_mib cannot be halved_from_sparse"),
    ],
)
def test_a_spec_field_that_cannot_mean_what_it_says_is_refused(tmp_path, field, said):
    """A fractional SM count sized waves on a fraction of an SM; halved_from_sparse on a cache size was
    printed as "(halved from a with-sparsity figure)". Both were taken without a word."""
    spec = tmp_path / "mine.toml"
    spec.write_text(f'[mine]\nname = "Mine"\nmemory_bandwidth_gbps = 2000\ntensor_bf16_tflops = 400\n{field}\n')
    assert_refused(run_in(tmp_path, "specs", "mine", "--spec-file", str(spec)), said, "valid:")
