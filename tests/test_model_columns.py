"""A model's step rows carry their phase and throughput as columns: written, read back (old files
without them too), shown by the report and judged by compare."""

from __future__ import annotations

import csv
import math

from result_factory import row, write

from rooflint.analysis.compare import SAME, SLOWER, compare_frames
from rooflint.outputs.report import build_report, to_json
from rooflint.outputs.report_render import render_markdown
from rooflint.outputs.results import read_results

MODEL_COLUMNS = ("phase", "batch", "context", "tokens_per_s", "floor_ms", "pct_of_floor")
DECODE = "op=step,phase=decode,B=8,prompt=512,new=128"


def decode_step(median_ms: float, **columns):
    """GPT-2's decode step at B=8: 8 tokens per step, a floor of 0.126 ms."""
    model = {
        "phase": "decode",
        "batch": 8,
        "context": 512 + 64,
        "tokens_per_s": 8 / (median_ms / 1e3),
        "floor_ms": 0.126,
        "pct_of_floor": 100 * 0.126 / median_ms,
    }
    return row("model:gpt2", "triton", median_ms, shape=DECODE, **{**model, **columns})


def test_model_columns_round_trip_through_csv_and_json_and_stay_empty_on_kernel_rows(tmp_path):
    rows = [decode_step(0.3), row("vector_add", "triton", 1.0)]
    csv_path = write(rows, tmp_path)
    for frame in (read_results(csv_path), read_results(tmp_path / "results.json")):
        model, kernel = frame.iloc[0], frame.iloc[1]
        assert (model["phase"], model["batch"], model["context"]) == ("decode", 8, 576)
        assert math.isclose(model["tokens_per_s"], 8 / 0.3e-3) and model["floor_ms"] == 0.126
        assert math.isclose(model["pct_of_floor"], 42.0)
        assert kernel["phase"] == "" and all(math.isnan(kernel[c]) for c in MODEL_COLUMNS[1:])


def test_a_results_file_from_before_the_model_columns_still_reads(tmp_path):
    path = write([decode_step(0.3)], tmp_path)
    with path.open(newline="") as handle:
        records = list(csv.DictReader(handle))
    with path.open("w", newline="") as handle:
        old = [name for name in records[0] if name not in MODEL_COLUMNS]
        writer = csv.DictWriter(handle, old, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)
    [read] = read_results(path).to_dict("records")
    assert read["phase"] == "" and math.isnan(read["tokens_per_s"]) and read["median_ms"] == 0.3


def test_compare_judges_a_drop_in_tokens_per_second_like_a_slower_time(tmp_path):
    base = read_results(write([decode_step(0.30)], tmp_path / "base"))
    slower = read_results(write([decode_step(0.36)], tmp_path / "new"))  # 20% fewer tok/s
    comparison = compare_frames(base, slower, threshold=0.05)
    [entry] = comparison.entries
    assert entry.verdict == SLOWER and math.isclose(entry.change, 0.2)
    assert f"({8 / 0.36e-3:.4g} tok/s)" in comparison.to_markdown()
    within = read_results(write([decode_step(0.31)], tmp_path / "within"))
    assert compare_frames(base, within, threshold=0.05).entries[0].verdict == SAME


def test_compare_reads_the_throughput_column_not_only_the_time(tmp_path):
    # Same step time, but NEW's step made fewer tokens per second: the throughput decides.
    base = read_results(write([decode_step(0.30)], tmp_path / "base"))
    new = read_results(write([decode_step(0.30, tokens_per_s=0.8 * 8 / 0.3e-3)], tmp_path / "new"))
    [entry] = compare_frames(base, new, threshold=0.05).entries
    assert entry.verdict == SLOWER and math.isclose(entry.change, 0.25)


def test_the_report_shows_the_model_columns_where_model_rows_are(tmp_path):
    frame = read_results(write([decode_step(0.3), row("vector_add", "triton", 1.0)], tmp_path))
    report = build_report(frame)
    families = {f["family"]: f["rows"] for f in report["gpus"][0]["families"]}
    [model] = families["model:gpt2"]
    assert model["phase"] == "decode" and model["batch"] == 8 and model["context"] == 576
    assert math.isclose(model["tokens_per_s"], 8 / 0.3e-3) and model["floor_ms"] == 0.126
    assert families["vector_add"][0]["tokens_per_s"] is None
    assert '"tokens_per_s": null' in to_json(report)  # JSON has no NaN
    markdown = render_markdown(report)
    model_table = markdown[markdown.index("model:gpt2") :]
    assert "tok/s" in model_table and "% of floor" in model_table and f"{8 / 0.3e-3:.4g}" in model_table
    kernel_table = markdown[markdown.index("vector_add") :]
    assert "tok/s" not in kernel_table.split("\n\n")[1]
