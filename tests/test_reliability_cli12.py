"""Commands run as a user runs them: the installed console script in a subprocess, on results files a
hand edit could leave and on the inputs of ab, profile, list, ceilings, roofline and plugins. Each
case is a bug found that way.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from console_script import ROOFLINT, assert_refused, needs_console_script, run_in
from result_factory import row, run, write

import rooflint.kernels.vector_add as vector_add_module
from rooflint.engine.settings import Regime
from rooflint.outputs.results import REGIMES

pytestmark = needs_console_script


def rooflint(*argv, tmp_path: Path) -> subprocess.CompletedProcess:
    return run_in(tmp_path, *argv, timeout=120)


def test_a_regime_rooflint_never_writes_is_refused_by_every_reader(tmp_path):
    # A hand-edited "warm" was reported as a regime of its own, linted clean and merged beside the
    # burst row as another measurement, exit 0; only compare (against a burst run) refused it.
    assert REGIMES == tuple(r.value for r in Regime)
    results = write([row(regime="warm"), *run()[1:]], tmp_path / "warm")
    commands = [("report", results), ("lint", results), ("merge", results, "--out", tmp_path / "m.csv")]
    commands.append(("compare", results, results))
    for argv in commands:
        done = rooflint(*argv, tmp_path=tmp_path)
        assert_refused(done, "line 2: regime 'warm' is not one rooflint writes; valid: burst, sustained, or empty")
    assert not (tmp_path / "m.csv").exists()
    # Both regimes, and none (an untimed row, an older file), are read as before.
    fine = [row(regime="burst"), row("softmax", regime="sustained"), row("rmsnorm", status="skipped")]
    done = rooflint("report", write(fine, tmp_path / "fine"), tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_lint_says_an_empty_file_is_empty_as_the_other_commands_do(tmp_path):
    # lint said "is not a CSV file: No columns to parse from file", a pandas message.
    for name, body in (("empty.csv", ""), ("blank.csv", "\n\n")):
        (tmp_path / name).write_text(body)
        for command in ("lint", "report"):
            done = rooflint(command, name, tmp_path=tmp_path)
            assert_refused(done, f"{name} is not a rooflint results file: it is empty")


def test_lint_judges_a_row_with_an_empty_gpu_as_the_report_draws_it(tmp_path):
    # A timed row whose gpu cell was blanked: the report drew it under "unknown GPU" against the
    # ceilings it recorded, while lint refused the whole file ("names no gpu").
    def without_gpu(median_ms: float, spread: float) -> Path:
        results = write([row(), row("softmax", median_ms=median_ms, spread=spread)], tmp_path / "run")
        lines = results.read_text().splitlines()
        lines[2] = lines[2].replace(",h100_sxm,", ",,")
        results.write_text("\n".join(lines) + "\n")
        return results

    results = without_gpu(2.0, 0.01)
    report = rooflint("report", results, tmp_path=tmp_path)
    assert report.returncode == 0 and "unknown GPU" in report.stdout, report.stdout + report.stderr
    done = rooflint("lint", results, tmp_path=tmp_path)
    assert done.returncode == 0 and "clean: 2 rows" in done.stdout, done.stdout + done.stderr
    # Judged against those ceilings: a time under the recorded roof's floor is still an error.
    done = rooflint("lint", without_gpu(0.0001, 0.0), tmp_path=tmp_path)  # its spread and rates with it
    assert done.returncode == 1 and "above_roof" in done.stdout, done.stdout + done.stderr
    # A plain CSV row naming no GPU has no recorded ceilings: still refused, and judged with --gpu.
    plain = tmp_path / "plain.csv"
    plain.write_text("kernel,time_ms,bytes\nk,1,2000000000\n")
    assert_refused(rooflint("lint", plain, tmp_path=tmp_path), "row 'k' names no gpu", "pass --gpu")
    done = rooflint("lint", plain, "--gpu", "h100_sxm", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_ab_refuses_a_csv_that_is_one_of_its_sources(tmp_path):
    # The table was written over the --source after the rounds, exit 0: the kernel's file was gone.
    kernel = Path(vector_add_module.__file__).read_text()
    for name in ("old.py", "new.py"):
        (tmp_path / name).write_text(kernel)
    argv = ("ab", "vector_add", "-V", "eager", "--source", "old.py", "--source", "new.py", "--device", "cpu")
    done = rooflint(*argv, "--size", "small", "--rounds", "2", "--csv", "./new.py", tmp_path=tmp_path)
    assert_refused(done, "--csv new.py is also an input (new.py)", "give another path")
    assert (tmp_path / "new.py").read_text() == kernel


def test_a_spec_file_number_past_any_gpu_is_refused_not_drawn(tmp_path):
    # 1e300 TFLOP/s (a typo for 1e3) was read, and roofline died drawing it: "OverflowError: cannot
    # convert float infinity to integer", exit 1, after matplotlib's warnings.
    for field, value in (("cuda_fp32_tflops", "1e300"), ("memory_bandwidth_gbps", "1e-300")):
        spec = tmp_path / f"{field}.toml"
        values = {"memory_bandwidth_gbps": "100", "cuda_fp32_tflops": "10", field: value}
        spec.write_text("[mygpu]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))
        for argv in (("roofline", "--gpu", "mygpu", "--out", "out"), ("specs", "mygpu")):
            done = rooflint(*argv, "--spec-file", spec, tmp_path=tmp_path)
            assert_refused(done, f"[mygpu] {field} {float(value):g} is past any GPU", "valid: a number from")
        assert not (tmp_path / "out" / "roofline.png").exists()


def test_an_l2_of_a_fraction_of_a_mib_is_not_rounded_down_to_none(tmp_path):
    # l2_mib = 0.5 was int()ed to 0 bytes: lint never said a working set fit in the cache (and a
    # 1.5 MiB L2 was taken for 1 MiB).
    spec = tmp_path / "small.toml"
    spec.write_text("[small_gpu]\nmemory_bandwidth_gbps = 100\ncuda_fp32_tflops = 10\nl2_mib = 0.5\n")
    plain = tmp_path / "plain.csv"
    plain.write_text("kernel,time_ms,bytes\nk,0.1,600000\n")
    done = rooflint("lint", plain, "--gpu", "small_gpu", "--spec-file", spec, tmp_path=tmp_path)
    assert "fits_in_cache" in done.stdout and "0.5 MiB cache" in done.stdout, done.stdout + done.stderr


def test_a_plugin_family_without_variants_is_named_not_dropped(tmp_path):
    # A plugin whose variant modules were never imported: `list` showed no line for it, and bench
    # said "no family supports the requested variants and dtypes", naming neither the family nor why.
    site = tmp_path / "site"
    info = site / "bare_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bare_plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rooflint.families]\nbare_op = bare_op_family\n")
    source = Path(vector_add_module.__file__).read_text().split("\n@FAMILY.variant")[0]
    (site / "bare_op_family.py").write_text(source.replace('"vector_add"', '"bare_op"', 1))
    env = dict(os.environ, PYTHONPATH=str(site), COLUMNS="250", ROOFLINT_CACHE=str(tmp_path / "cache"))
    env.pop("ROOFLINT_FAMILY_MODULES", None)

    def run_with_plugin(*argv):
        return subprocess.run([ROOFLINT, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    why = "bare_op_family (entry point of bare_plugin) defines FAMILY 'bare_op' with no variant"
    for argv in (("bench", "bare_op", "--no-plots"), ("profile", "bare_op"), ("ab", "bare_op")):
        assert_refused(run_with_plugin(*argv, "--device", "cpu"), why)
    listed = run_with_plugin("list")
    assert listed.returncode == 0 and "bare_op" in listed.stdout and "with no variant" in listed.stdout, listed.stdout
