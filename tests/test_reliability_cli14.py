"""`rooflint bench`'s run control on the CPU, run as a user runs it (the installed console script in a
subprocess). Each case is a bug found that way: an empty --out writing the run into the current
folder, a Ctrl-C while the plots were drawn (or before the first row) ending the run without a word
and without its JUnit file, the JUnit file of a stopped run reading as a whole run that passed, a
JUnit file cut short by a stop while written, and the results.prev.json of an older run left beside
the last run's results.prev.csv.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import cpu_ceilings
import pytest
from console_script import ROOFLINT, assert_refused, needs_console_script, run_in
from result_factory import read_csv, row, write

FIXTURES = Path(__file__).parent / "fixtures"
QUICK = ("--device", "cpu", "--dtype", "fp32", "--size", "small")


def plugin_env(tmp_path: Path, module: str, **extra: str) -> dict[str, str]:
    """The console script's environment with ``module`` (in tmp_path or tests/fixtures) as a plugin."""
    env = dict(os.environ, ROOFLINT_CACHE=str(tmp_path / "cache"), COLUMNS="200", ROOFLINT_FAMILY_MODULES=module)
    cpu_ceilings.seed(env["ROOFLINT_CACHE"])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), str(FIXTURES), os.environ.get("PYTHONPATH")]))
    env.pop("ROOFLINT_DEBUG", None)
    env.update(extra)
    return env


def bench(tmp_path: Path, module: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [ROOFLINT, "bench", *argv], capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env=plugin_env(tmp_path, module), check=False,
    )  # fmt: skip


def junit_cases(path: Path) -> dict[str, str]:
    """{test case name: "ok" or the tag of its failure, error or skip} of a JUnit file."""
    cases = ET.parse(path).getroot().iter("testcase")
    return {case.get("name"): next((child.tag for child in case), "ok") for case in cases}


@needs_console_script
@pytest.mark.parametrize(("option", "value"), [("--out", ""), ("--out", " "), ("--junit", ""), ("--junit", " ")])
def test_an_empty_out_or_junit_is_refused_not_read_as_the_current_folder(tmp_path, option, value):
    # `--out "$OUT"` with OUT unset: "" became Path("."), and the run wrote results.csv into the
    # current folder, moving the results.* there aside; `--junit ""` was refused as "JUnit report .".
    done = run_in(tmp_path, "bench", "vector_add", "-V", "eager", *QUICK, "--no-plots", option, value)
    assert_refused(done, f"{option} is empty", "leave it out" if option == "--junit" else "rooflint-out")
    assert "JUnit report ." not in done.stderr
    assert cpu_ceilings.written_besides_the_seed(tmp_path) == []


@needs_console_script
def test_ctrl_c_while_plotting_keeps_the_run_and_writes_its_junit(tmp_path):
    # A SIGINT while the rooflines were drawn left the bench at once: exit 130 without a word,
    # without the table or the summary, and the JUnit file of the last run stayed as this one's.
    (tmp_path / "stop_at_plots.py").write_text(
        "import os, signal\n"
        "import rooflint.outputs.plot as plot\n"
        "from fragile_family import FAMILY  # noqa: F401\n"
        "def stop(*args, **kwargs):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "plot.plot_roofline = stop\n"
    )
    (tmp_path / "junit.xml").write_text("the last run's file")
    done = bench(tmp_path, "stop_at_plots", "fragile", *QUICK, "--out", "out", "--junit", "junit.xml")
    everything = done.stdout + done.stderr
    assert done.returncode == 130, everything
    assert "Traceback" not in everything
    assert "interrupted: 3 rows measured before it are in out" in done.stderr
    assert "wrote out/results.csv" in done.stdout
    assert junit_cases(tmp_path / "junit.xml") == dict.fromkeys(
        ["eager[fp32,n=4096]", "killed[fp32,n=4096]", "slow[fp32,n=4096]"], "ok"
    )
    assert [r["status"] for r in read_csv(tmp_path / "out" / "results.csv")] == ["ok"] * 3
    assert not (tmp_path / "out" / ".rooflint.lock").exists()


@needs_console_script
def test_ctrl_c_before_the_first_row_says_it_was_interrupted(tmp_path):
    # A SIGINT while the bench was starting (here: as it imported a family) became typer's bare
    # exit 130: nothing on stderr said the run had stopped.
    (tmp_path / "stop_at_import.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\nfrom fragile_family import FAMILY  # noqa: F401\n"
    )
    done = bench(tmp_path, "stop_at_import", "fragile", *QUICK, "--out", "out")
    assert done.returncode == 130, done.stdout + done.stderr
    assert "interrupted" in done.stderr and "Traceback" not in done.stdout + done.stderr


@needs_console_script
def test_the_junit_file_of_a_stopped_run_does_not_read_as_a_passing_run(tmp_path):
    # SIGTERM (a CI job's timeout) after two of three rows: the JUnit file held the two that passed
    # and nothing else, a green run to any CI that reads it.
    env = plugin_env(tmp_path, "fragile_family", ROOFLINT_TEST_HOLD=str(tmp_path / "never"))
    argv = [ROOFLINT, "bench", "fragile", *QUICK, "--no-plots", "--out", "out", "--junit", "junit.xml"]
    running = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results, deadline = tmp_path / "out" / "results.csv", time.monotonic() + 120
    try:
        # `slow` waits for a file never written: once `killed` is on disk no other row can land.
        while not (results.exists() and "killed" in {r["variant"] for r in read_csv(results)}):
            assert running.poll() is None and time.monotonic() < deadline, running.communicate()
            time.sleep(0.1)
        running.send_signal(signal.SIGTERM)
        out, err = running.communicate(timeout=60)
    finally:
        (tmp_path / "never").touch()  # a worker left behind finishes
        if running.poll() is None:
            running.kill()
    assert running.returncode == 130, out + err
    cases = junit_cases(tmp_path / "junit.xml")
    assert cases == {"eager[fp32,n=4096]": "ok", "killed[fp32,n=4096]": "ok", "interrupted": "error"}
    error = ET.parse(tmp_path / "junit.xml").getroot().find(".//testcase[@name='interrupted']/error")
    assert "before 1 planned row ran" in error.get("message")


def test_a_junit_file_stopped_while_written_keeps_the_last_one(tmp_path, monkeypatch):
    # Written in place, a stop midway left a cut-short file no CI could parse, the last one gone.
    from rooflint.outputs.junit import write_junit

    path = tmp_path / "junit.xml"
    write_junit([row("vector_add", "eager", 1.0)], path)
    before = path.read_bytes()
    calls = []

    def stopped_midway(text):
        calls.append(text)
        if len(calls) > 3:
            raise KeyboardInterrupt
        return text

    monkeypatch.setattr(ET, "_escape_attrib", stopped_midway)
    with pytest.raises(KeyboardInterrupt):
        write_junit([row("vector_add", variant, 1.0) for variant in ("eager", "triton", "cuda")], path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junit.xml"]


@needs_console_script
def test_an_older_results_prev_json_does_not_stay_beside_the_last_runs_csv(tmp_path):
    # The last run was killed (SIGKILL, the OOM killer) before its results.json: the next run moved
    # its results.csv to results.prev.csv and left the run before it's results.prev.json beside it.
    out = tmp_path / "out"
    write([row("vector_add", "eager", 2.0)], out)
    (out / "results.csv").replace(out / "results.prev.csv")
    (out / "results.json").replace(out / "results.prev.json")  # the older run's pair
    killed = write([row("vector_add", "eager", 1.0)], out).read_text()
    (out / "results.json").unlink()  # the killed run wrote none
    done = run_in(tmp_path, "bench", "vector_add", "-V", "eager", *QUICK, "--no-plots", "--out", "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "results.prev.csv").read_text() == killed
    assert not (out / "results.prev.json").exists()
