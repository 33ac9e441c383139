"""lint, specs and ceilings run as a user runs them: the installed console script in a subprocess.
Each case is an input that once passed unread or was read as something else: a spec file's GPU
key no name could reach, a spec file ceilings never opened, counters that joined no row, a plain
row with nothing to judge, a `correct` cell read as passing, an empty --gpu read as none.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from console_script import assert_refused, needs_console_script, run_in
from result_factory import run, write

pytestmark = needs_console_script

GPU = "memory_bandwidth_gbps = 100\ncuda_fp32_tflops = 1\n"


def rooflint(*argv, cwd: Path) -> subprocess.CompletedProcess:
    return run_in(cwd, *argv)


def test_a_spec_file_key_is_found_by_its_own_name_and_never_shadows_the_datasheet(tmp_path):
    # [MyGPU] was listed, then "unknown GPU 'MyGPU'; valid: ..., MyGPU"; [H100] or [h100] silently
    # gave the datasheet's H100 SXM (or replaced it for every row naming h100).
    spec = tmp_path / "spec.toml"
    for key, lookups in (("MyGPU", ("MyGPU", "mygpu")), ("my gpu", ("my gpu", "my-gpu", "my_gpu"))):
        spec.write_text(f'["{key}"]\n{GPU}')
        for name in lookups:
            done = rooflint("specs", name, "--spec-file", spec, cwd=tmp_path)
            assert done.returncode == 0, done.stdout + done.stderr
            assert "(user)" in done.stdout, done.stdout
    for key, expected in (
        ("H100", "[h100] is an alias"),
        ("h100", "[h100] is an alias"),
        ("H100_SXM", "rooflint's own"),
    ):
        spec.write_text(f'["{key}"]\n{GPU}')
        assert_refused(rooflint("specs", "h100", "--spec-file", spec, cwd=tmp_path), expected, "_custom]")
    spec.write_text(f"[MyGPU]\n{GPU}\n[mygpu]\n{GPU}")
    assert_refused(rooflint("specs", "--spec-file", spec, cwd=tmp_path), "[MyGPU] and [mygpu] are one GPU key")


def test_ceilings_on_a_cpu_checks_its_spec_file_and_out_before_measuring(tmp_path):
    # The CPU run never read --spec-file: a missing or malformed one passed with exit 0.
    bad = tmp_path / "bad.toml"
    bad.write_text("[g\nmemory_bandwidth_gbps = 100\n")
    out = tmp_path / "ceilings"
    assert_refused(rooflint("ceilings", "--device", "cpu", "--spec-file", bad, "--out", out, cwd=tmp_path), "TOML")
    missing = tmp_path / "none.toml"
    done = rooflint("ceilings", "--device", "cpu", "--spec-file", missing, "--out", out, cwd=tmp_path)
    assert_refused(done, "spec file", "does not exist")
    assert not out.exists()
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder would have to be")
    done = rooflint("ceilings", "--device", "cpu", "--out", blocker / "sub", cwd=tmp_path)
    assert_refused(done, "cannot write to output directory", "blocker is a file")


def test_lint_refuses_counters_that_are_not_counts_or_join_no_row(tmp_path):
    results = write(run(), tmp_path / "r")
    header = "family,variant,dtype,shape,measured_dram_bytes\n"
    key = "vector_add,triton,bf16,n=268435456"
    counters = tmp_path / "ncu.csv"
    for value in ("abc", "-5", "inf"):
        counters.write_text(f"{header}{key},{value}\n")
        done = rooflint("lint", results, "--counters", counters, cwd=tmp_path)
        assert_refused(done, "line 2", f"measured_dram_bytes '{value}' is not a byte count")
    for rows in ("", "softmax,x,bf16,n=1,1e9\n"):  # no rows, or another run's
        counters.write_text(header + rows)
        done = rooflint("lint", results, "--counters", counters, cwd=tmp_path)
        assert_refused(done, "--counters", "no row of", "joined on family, variant, dtype and shape")
    counters.write_text(f"{header}{key},1e3\nvector_add,eager,bf16,n=268435456,\n")  # empty: ncu measured nothing
    done = rooflint("lint", results, "--counters", counters, cwd=tmp_path)
    assert done.returncode == 0 and "bytes_disagree" in done.stdout, done.stdout + done.stderr


def test_a_plain_row_with_nothing_to_judge_is_refused(tmp_path):
    # A row without a time or rate, or a time without flops or bytes, linted "clean" unread.
    plain = tmp_path / "plain.csv"
    for rows in ("k,h100,nan,1e9\n", "k,h100,1,\n", "k,h100,,\n"):
        plain.write_text("kernel,gpu,time_ms,bytes\n" + rows)
        assert_refused(rooflint("lint", plain, cwd=tmp_path), "line 2", "row 'k' has nothing to judge", "valid:")


def test_a_plain_correct_cell_that_is_not_true_or_false_is_refused(tmp_path):
    # "fail" (and "maybe") read as passing; a 0 beside an empty cell was read as 0.0, passing too.
    plain = tmp_path / "plain.csv"
    plain.write_text("kernel,gpu,time_ms,bytes,correct\nk,h100,1,1e9,fail\n")
    assert_refused(rooflint("lint", plain, cwd=tmp_path), "line 2", "correct 'fail' is not true or false", "valid:")
    plain.write_text("kernel,gpu,time_ms,bytes,correct\nk,h100,1,1e9,1\nk2,h100,1,1e9,\nk3,h100,1,1e9,0\n")
    done = rooflint("lint", plain, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "k3" in done.stdout and "correctness_failed" in done.stdout


def test_an_empty_gpu_is_refused_not_read_as_none(tmp_path):
    # `--gpu "$GPU"` with GPU unset judged each row on its own GPU (no wrong_gpu rule), and
    # `rooflint specs ""` listed every GPU.
    plain = tmp_path / "plain.csv"
    plain.write_text("kernel,gpu,time_ms,bytes\nk,h100,1,1e9\n")
    assert_refused(rooflint("lint", plain, "--gpu", "", cwd=tmp_path), "--gpu is empty", "rooflint specs")
    assert_refused(rooflint("specs", "", cwd=tmp_path), "unknown GPU ''", "valid:")
    # every command's --gpu: an empty name is refused before anything runs
    for argv in (
        ("roofline", "--out", tmp_path / "o"),
        ("ceilings", "--device", "cpu"),
        ("bench", "softmax", "--device", "cpu"),
    ):
        assert_refused(rooflint(*argv, "--gpu", " ", cwd=tmp_path), "--gpu is empty")
    assert not (tmp_path / "o").exists()
