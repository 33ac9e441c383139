"""model and bench's fleet options, run as a user runs them: the installed console script in a
subprocess. Each case is a bug found that way: an empty model name running the config.json of the
current folder, a config.json's negative rms_norm_eps or rope factor under 1 run as a model, a
model run writing over the folder a bench holds, a --scheduler local run let past the memory check,
an empty --device read as cuda for a remote scheduler, and a stored fleet duration of Infinity
crashing the fleet.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
from console_script import assert_refused, needs_console_script, run_in
from result_factory import read_csv, row, write
from tiny_llama import TINY_LLAMA

from rooflint.outputs.folder_lock import LOCK_NAME

pytestmark = needs_console_script

QUICK_MODEL = ("--batch", "1", "--seq", "16", "--prompt", "8", "--new-tokens", "2", "--dtype", "fp32",
               "--device", "cpu", "--no-plots")  # fmt: skip


def rooflint(*argv, tmp_path: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return run_in(tmp_path, *argv, timeout=timeout)


def test_an_empty_model_name_is_refused_not_read_as_the_current_folder(tmp_path):
    # `rooflint model "$MODEL"` with MODEL unset: "" was a path, the current folder, whose
    # config.json was built and measured (exit 0, written as model-.md).
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    done = rooflint("model", "", *QUICK_MODEL, "--out", "out", tmp_path=tmp_path)
    assert_refused(done, "the model name is empty", "gpt2", "config.json path")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"rms_norm_eps": -1.0}, "rms_norm_eps"),  # every logit NaN: the eager set "failed", exit 1
        ({"rope_scaling": {"rope_type": "linear", "factor": 0.0}}, "factor"),  # NaN logits, exit 1
        ({"rope_scaling": {"rope_type": "linear", "factor": -2.0}}, "factor"),  # ran and passed, exit 0
    ],
)
def test_model_config_values_out_of_range_are_refused(tmp_path, fields, named):
    (tmp_path / "config.json").write_text(json.dumps({**TINY_LLAMA, **fields}))
    done = rooflint("model", "config.json", *QUICK_MODEL, "--out", "out", tmp_path=tmp_path)
    assert_refused(done, "config.json", named)
    assert not (tmp_path / "out").exists()


def test_a_model_run_is_refused_a_folder_a_bench_is_writing(tmp_path):
    # The model run opened results.csv over the bench's, which lost its rows to the truncation.
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    results = write([row("vector_add", "eager", 1.0)], tmp_path / "out")
    before = results.read_text()
    lock = tmp_path / "out" / LOCK_NAME
    held = {"pid": os.getpid(), "host": socket.gethostname(), "started": "now", "command": "rooflint bench"}
    lock.write_text(json.dumps(held))
    done = rooflint("model", "config.json", *QUICK_MODEL, "--out", "out", tmp_path=tmp_path)
    assert_refused(done, f"pid {os.getpid()}", "pick another --out")
    assert results.read_text() == before
    # Once the bench is done the model run writes there, and leaves no lock of its own behind.
    lock.unlink()
    done = rooflint("model", "config.json", *QUICK_MODEL, "--out", "out", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {r["family"] for r in read_csv(results)} == {"model:config"}
    assert not lock.exists()


def test_a_local_fleet_refuses_a_size_too_big_for_this_machine(tmp_path):
    # A local cluster's worker is this machine: the size reached it and became an errored row, exit 1.
    done = rooflint(
        "bench", "vector_add", "-V", "eager", "--device", "cpu", "--scheduler", "local",
        "--size", "n=100000000000", "--out", "out", tmp_path=tmp_path,
    )  # fmt: skip
    assert_refused(done, "n=100000000000", "pick a smaller --size")
    assert not (tmp_path / "out").exists()


def test_an_empty_device_is_refused_for_a_remote_scheduler_too(tmp_path):
    # `--device "$DEVICE"` with DEVICE unset was read as cuda, and the run went on to the scheduler.
    done = rooflint(
        "bench", "vector_add", "--device", "", "--scheduler", "tcp://127.0.0.1:1", "--out", "out",
        tmp_path=tmp_path, timeout=20,
    )  # fmt: skip
    assert_refused(done, "unknown device ''", "cuda, cpu")
    assert not (tmp_path / "out").exists()


def test_a_stored_duration_of_infinity_is_ignored_not_a_crash(tmp_path):
    # durations.json is a cache: "a cache never stops a bench". Infinity sized the groups as NaN:
    # ValueError, exit 1, no row measured.
    table = tmp_path / "cache" / "fleet" / "durations.json"
    table.parent.mkdir(parents=True)
    table.write_text('{"schema": 1, "seconds": {"cpu": {"vector_add/eager/fp32/n=4096": Infinity}}}')
    done = rooflint(
        "bench", "vector_add", "-V", "eager", "--dtype", "fp32", "--size", "n=4096", "--device", "cpu",
        "--scheduler", "local", "--no-plots", "--out", "out", tmp_path=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert [(r["variant"], r["status"]) for r in read_csv(tmp_path / "out" / "results.csv")] == [("eager", "ok")]
    stored = json.loads(table.read_text())["seconds"]["cpu"]["vector_add/eager/fp32/n=4096"]
    assert 0 <= stored < float("inf")  # this run's own measure replaced it
