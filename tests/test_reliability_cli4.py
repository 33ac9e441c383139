"""`rooflint ab`, `profile`, `model` and the readers of what they write, used as a demanding user
uses them through the installed console script: each test is a bug found that way (an entry that
raises after its checked first call, an A/B stopped with Ctrl-C, a --gpu a CPU run ignored, model
rows whose roofline labels were alike)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from console_script import ROOFLINT, assert_refused, needs_console_script
from result_factory import CPU, read_csv, row, write

pytestmark = needs_console_script

FIXTURES = Path(__file__).parent / "fixtures"


def rooflint(*args: str, family_module: str | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([ROOFLINT, *args], capture_output=True, text=True, timeout=timeout, check=False,
                          env=_env(family_module))  # fmt: skip


def _env(family_module: str | None) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "200"}
    if family_module:
        env["ROOFLINT_FAMILY_MODULES"] = family_module
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FIXTURES), os.environ.get("PYTHONPATH")]))
    return env


def test_ab_drops_an_entry_that_raises_while_timed_and_keeps_the_others(tmp_path):
    # The whole A/B ended in one error line: no table, no CSV, every shape's rounds lost.
    table = tmp_path / "ab.csv"
    done = rooflint(
        "ab", "abtoy", "-V", "eager,flaky,added", "--device", "cpu", "--size", "two", "--rounds", "2",
        "--regime", "burst", "--csv", str(table), family_module="ab_family",
    )  # fmt: skip
    everything = done.stdout + done.stderr
    assert done.returncode == 1, everything
    assert "Traceback" not in everything
    assert "flaky" in done.stdout and "raised while timed" in done.stdout and "planted failure" in done.stdout
    rows = read_csv(table)
    assert [(r["shape"], r["entry"]) for r in rows] == [
        ("n=1024", "eager"), ("n=1024", "added"), ("n=2048", "eager"), ("n=2048", "added"),
    ]  # fmt: skip
    assert all(len(r["rounds_ms"].split()) == 2 for r in rows)


def test_ab_stopped_by_a_signal_keeps_the_rounds_it_completed(tmp_path):
    # Ctrl-C or SIGTERM ended ab with a silent exit 130: the rounds already timed were lost, no CSV.
    table = tmp_path / "ab.csv"
    command = [ROOFLINT, "ab", "abtoy", "-V", "eager,added", "--device", "cpu", "--size", "two", "--rounds", "100000",
               "--regime", "burst", "--csv", str(table)]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=_env("ab_family")) as running:  # fmt: skip
        for line in running.stderr:
            if "round 3/" in line:
                running.send_signal(signal.SIGTERM)
                break
        stdout, stderr = running.communicate(timeout=120)
    assert running.returncode == 130, stdout + stderr
    assert "Traceback" not in stdout + stderr
    assert "interrupted" in stderr
    rows = read_csv(table)
    assert [r["entry"] for r in rows] == ["eager", "added"]
    assert all(r["shape"] == "n=1024" and int(r["rounds"]) >= 3 for r in rows)
    assert len({r["rounds"] for r in rows}) == 1  # whole rounds only: each entry timed in every one


def test_profile_keeps_the_other_variants_when_one_raises_while_profiled(tmp_path):
    # A variant that passed its check and raised under the profiler ended the profile in one error
    # line: no kernels.csv, the variants profiled before it lost.
    done = rooflint(
        "profile", "abtoy", "-V", "eager,flaky,added", "--device", "cpu", "--out", str(tmp_path),
        family_module="ab_family",
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    rows = read_csv(tmp_path / "kernels.csv")
    assert {r["variant"]: r["status"] for r in rows} == {"eager": "ok", "flaky": "error", "added": "ok"}
    [flaky] = [r for r in rows if r["variant"] == "flaky"]
    assert flaky["kernel"] == "" and "planted failure" in flaky["message"]


def test_profile_refuses_a_gpu_flag_it_would_ignore(tmp_path):
    # Without --ncu nothing is judged against a GPU: a typo'd --gpu or a missing --spec-file passed.
    out = tmp_path / "p"
    base = ("profile", "vector_add", "-V", "eager", "--device", "cpu", "--out", str(out))
    assert_refused(rooflint(*base, "--gpu", "nosuch"), "unknown GPU 'nosuch'")
    assert_refused(rooflint(*base, "--gpu", "h100_sxm"), "--gpu h100_sxm", "CPU")
    assert_refused(rooflint(*base, "--spec-file", str(tmp_path / "none.toml")), "none.toml", "does not exist")
    assert not out.exists()


def test_model_refuses_a_gpu_for_a_cpu_run(tmp_path):
    # The CPU rows were judged on the CPU's measured ceilings: --gpu h100_sxm changed nothing, silently.
    out = tmp_path / "m"
    done = rooflint(
        "model", "gpt2", "--device", "cpu", "--dtype", "fp32", "--layers", "1", "--seq", "8", "--prompt", "4",
        "--new-tokens", "2", "--gpu", "h100_sxm", "--out", str(out),
    )  # fmt: skip
    assert_refused(done, "--gpu h100_sxm", "CPU")
    assert not out.exists()


def test_roofline_labels_a_model_s_decode_and_sweep_rows_apart(tmp_path):
    # Labels took their keys from the first row (a prefill's): decode rows read T=None and the
    # sweep's points at two contexts had one label.
    family = "model:gpt2-L1"
    shapes = [
        "op=step,phase=prefill,B=8,T=8",
        "op=step,phase=decode,B=8,prompt=4,new=2",
        "op=step,phase=decode,B=8,context=16,sweep=1",
        "op=step,phase=decode,B=8,context=32,sweep=1",
    ]
    rows = [row(family, "eager", 1.0 + i, dtype="fp32", shape=s, gpu="cpu", spec=CPU) for i, s in enumerate(shapes)]
    results = write(rows, tmp_path / "run")
    done = rooflint("roofline", str(results), "--out", str(tmp_path / "plots"))
    assert done.returncode == 0, done.stdout + done.stderr
    labels = [r["label"] for r in read_csv(tmp_path / "plots" / "roofline.csv") if r["label"].startswith(family)]
    assert len(labels) == 4 and len(set(labels)) == 4, labels
    assert not any("None" in label for label in labels), labels
    assert any("prompt=4,new=2" in label for label in labels) and any("context=32" in label for label in labels)


def test_an_ab_entry_that_skips_itself_is_a_skip_not_a_failed_check(tmp_path):
    # A variant that cannot run at a shape (a library lacking it) was printed as "failed its float64
    # check" and made the A/B exit 1; a skipped bench row is no failure, nor is a skipped entry. An
    # entry is skipped when it is built, before either regime is timed: burst only, as in the other
    # A/B tests here, spares the sustained regime's CPU heat-up (2 s an entry a round).
    done = rooflint("ab", "abtoy", "-V", "eager,picky", "--device", "cpu", "--size", "two", "--rounds", "2",
                    "--regime", "burst", family_module="ab_family")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "failed its float64 check" not in done.stdout
    assert "skipped, not timed: picky at n=2048: takes no n = 2048 (planted)" in done.stdout
    assert "n=1024" in done.stdout  # the other shape was compared


def test_an_option_that_takes_one_value_given_twice_is_refused(tmp_path):
    # click runs the last value silently: `model --dtype bf16 --dtype fp32` measured fp32 only.
    done = rooflint("model", "gpt2", "--dtype", "bf16", "--dtype=fp32", "--device", "cpu", "--out", str(tmp_path / "m"))
    assert_refused(done, "--dtype is given 2 times (bf16, fp32); give it once")
    assert not (tmp_path / "m").exists()
    assert_refused(rooflint("lint", str(tmp_path / "r.csv"), "--gpu", "h100_sxm", "--gpu", "h200"), "--gpu is given 2")
    # Options that take several values may repeat: bench's --dtype and --variants.
    done = rooflint("bench", "vector_add", "-V", "eager", "-V", "triton", "--dtype", "fp32", "--dtype", "bf16",
                    "--device", "cpu", "--size", "small", "--no-plots", "--out", str(tmp_path / "b"))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
