"""The device config scripts run each config in a child process under a time limit
(scripts/device/side_by_side.py's run_child): a child's rows, its crash and its hang each come back
as rows, so one bad config never costs the others. Checked here with tiny children on the CPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "device"))
side_by_side = pytest.importorskip("side_by_side")  # imports triton.testing


def child(code: str) -> list[str]:
    return [sys.executable, "-c", "import json, time\n" + code]


def row(config: str, ms: float) -> str:
    return f'print("ROW " + json.dumps({{"config": "{config}", "ms": {ms}}}), flush=True)'


def test_rows_come_back_with_their_wall_time():
    rows = side_by_side.run_child(child('print("noise")\n' + row("a", 1.5)), 30, {"config": "a"})
    assert [(r["config"], r["ms"]) for r in rows] == [("a", 1.5)]
    assert rows[0]["wall_s"] >= 0


def test_a_crash_keeps_the_rows_before_it_and_says_why():
    rows = side_by_side.run_child(child(row("b", 2.0) + '\nraise SystemExit("bad tile")'), 30, {"config": "b"})
    assert rows[0]["ms"] == 2.0
    assert rows[1]["config"] == "b" and rows[1]["status"] == "exit 1: bad tile"


def test_a_hang_is_cut_off_at_the_limit():
    rows = side_by_side.run_child(child(row("c", 3.0) + "\ntime.sleep(60)"), 3, {"config": "c"})
    assert rows[0]["ms"] == 3.0
    assert rows[-1]["status"] == "no result within 3 s"


def test_rows_of_different_keys_share_one_csv(tmp_path):
    side_by_side.write_rows(tmp_path / "rows.csv", [{"config": "a", "ms": 1.0}, {"config": "b", "status": "exit 1"}])
    assert (tmp_path / "rows.csv").read_text().splitlines() == ["config,ms,status", "a,1.0,", "b,,exit 1"]


def test_check_row_writes_each_row_at_once_and_stops_on_a_wrong_result(tmp_path):
    import csv

    import torch

    from rooflint.core.registry import get_family

    family, path, rows = get_family("vector_add"), tmp_path / "sweep.csv", []
    params = {"n": 1000}
    side_by_side.check_row(family, params, "fp32", lambda case: case["a"] + case["b"], "right", rows, path,
                           device="cpu")  # fmt: skip
    assert [r["shape"] for r in csv.DictReader(open(path))] == ["right"] and rows[0]["status"] == "ok"
    with pytest.raises(SystemExit, match="wrong"):
        side_by_side.check_row(family, params, "fp32", lambda case: case["a"] - case["b"], "wrong", rows, path,
                               device="cpu")  # fmt: skip
    on_disk = list(csv.DictReader(open(path)))
    assert [r["shape"] for r in on_disk] == ["right", "wrong"] and on_disk[1]["status"] != "ok"
    # Identical bits over repeated calls, or not.
    side_by_side.repeat_row(lambda: torch.ones(3), 5, rows, path)
    counter = iter(range(100))
    side_by_side.repeat_row(lambda: torch.full((3,), float(next(counter))), 5, rows, path, "racy ")
    assert [(r["shape"], r["status"]) for r in list(csv.DictReader(open(path)))[2:]] == [
        ("repeatable over 5 calls", "ok"),
        ("racy repeatable over 5 calls", "differs"),
    ]


def test_output_csv_lands_under_out(tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    path = side_by_side.output_csv("sweep.csv")
    assert path == tmp_path / "out" / "sweep.csv" and path.parent.is_dir()


def test_time_rounds_alternates_the_entries_under_the_given_timer():
    order = []
    entries = {"a": lambda: order.append("a") or 1.0, "b": lambda: order.append("b") or 2.0}
    times = side_by_side.time_rounds(entries, 3, timer=lambda call: call())
    assert order == ["a", "b"] * 3 and times == {"a": [1.0] * 3, "b": [2.0] * 3}
