"""rooflint merge: results from several GPUs into one file, duplicates resolved by timestamp."""

from __future__ import annotations

import json

import pytest
from result_factory import run, write
from typer.testing import CliRunner

from rooflint.cli.app import app
from rooflint.outputs.merge import merge_files
from rooflint.outputs.results import COLUMNS, SCHEMA_VERSION, read_results

runner = CliRunner()


def _stamp(rows, when):
    for item in rows:
        item.timestamp = when
    return rows


@pytest.mark.parametrize("newer_first", [True, False])
def test_newest_timestamp_wins_whatever_the_order(tmp_path, newer_first):
    old = write(_stamp(run(), "2026-11-01T09:00:00+00:00"), tmp_path / "old")
    new = write(_stamp(run(scale=0.5), "2026-11-02T09:00:00+00:00"), tmp_path / "new")
    a100 = write(run("a100_80gb_sxm", slower_gpu=1.6), tmp_path / "a100")
    paths = [new, old, a100] if newer_first else [old, new, a100]
    merged = merge_files(paths)
    frame = merged.frame
    assert len(frame) == 8  # 4 keys on the H100 (once each) + 4 on the A100
    assert len(merged.duplicates) == 4
    h100_triton = frame[(frame["gpu"] == "h100_sxm") & (frame["variant"] == "triton")]
    assert sorted(h100_triton["median_ms"]) == pytest.approx([0.045, 0.275])  # the 0.5x run
    assert set(h100_triton["timestamp"]) == {"2026-11-02T09:00:00+00:00"}


def test_tie_goes_to_the_later_file_and_undated_rows_lose(tmp_path):
    first = write(run(), tmp_path / "first")
    second = write(run(scale=2.0), tmp_path / "second")
    frame = merge_files([first, second]).frame
    assert sorted(frame[frame["variant"] == "triton"]["median_ms"]) == pytest.approx([0.18, 1.1])

    undated = write(_stamp(run(scale=3.0), ""), tmp_path / "undated")
    frame = merge_files([first, undated]).frame  # undated comes later but has no timestamp
    assert sorted(frame[frame["variant"] == "triton"]["median_ms"]) == pytest.approx([0.09, 0.55])


def test_merge_command_writes_a_results_file(tmp_path):
    h100 = write(run(), tmp_path / "h100")
    a100 = write(run("a100_80gb_sxm", slower_gpu=1.6), tmp_path / "a100")
    out = tmp_path / "merged" / "all.csv"
    result = runner.invoke(app, ["merge", str(h100), str(a100), str(h100), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "merged 8 rows from 3 files (GPUs: a100_80gb_sxm, h100_sxm)" in result.output
    assert "dropped 4 duplicate rows, keeping the newest timestamp" in result.output
    frame = read_results(out)
    assert list(frame.columns) == COLUMNS
    assert sorted(set(frame["gpu"])) == ["a100_80gb_sxm", "h100_sxm"]
    assert len(frame) == 8

    as_json = tmp_path / "all.json"
    assert runner.invoke(app, ["merge", str(h100), str(a100), "--out", str(as_json)]).exit_code == 0
    payload = json.loads(as_json.read_text())
    assert payload["schema_version"] == SCHEMA_VERSION and len(payload["rows"]) == 8


def test_merge_rejects_bad_input(tmp_path):
    missing = runner.invoke(app, ["merge", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "m.csv")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    good = write(run(), tmp_path / "good")
    blocker = tmp_path / "file"
    blocker.write_text("")
    unwritable = runner.invoke(app, ["merge", str(good), "--out", str(blocker / "m.csv")])
    assert unwritable.exit_code == 2 and "cannot write" in unwritable.output
