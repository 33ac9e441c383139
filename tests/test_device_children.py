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
