"""A model run with quantized decode weights is another configuration than the bf16 run, and its rows
say so (run as a user runs it: the installed console script, a tiny Llama config on the CPU).

Before, `rooflint model ... --weights-dtype int8` wrote its decode rows under the same family,
variant, dtype and shape as the bf16 run's: `rooflint compare bf16/results.csv int8/results.csv`
paired an int8 step with a bf16 step and called the difference "faster" or "slower", `merge` would
have let one replace the other, and the Markdown's title said "(bf16)" over the int8 numbers. Now
the decode and generate rows of a set that ran its projections on codes carry `weights=int8` in
their shape, the prefill rows (bf16 weights in every set) stay comparable, and the titles name the
format."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from console_script import needs_console_script, run_in
from tiny_llama import TINY_LLAMA

pytest.importorskip("transformers", reason="the model tests need transformers")
# One worker runs the module: its two `rooflint model` runs are made once, not on each.
pytestmark = [needs_console_script, pytest.mark.xdist_group("model_weights_identity")]

RUN = ("--device", "cpu", "--batch", "2", "--seq", "16", "--prompt", "8", "--new-tokens", "4", "--no-plots")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("weights")
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
    for name, extra in (("bf16", ()), ("int8", ("--weights-dtype", "int8"))):
        done = run_in(folder, "model", "config.json", *RUN, *extra, "--out", name)
        assert done.returncode == 0, done.stdout + done.stderr
    return folder


def test_quantized_decode_rows_carry_their_weights_and_prefill_rows_do_not(runs):
    bf16, int8 = (pd.read_csv(runs / name / "results.csv") for name in ("bf16", "int8"))
    assert not bf16["shape"].str.contains("weights=").any()
    phases = int8["shape"].str.extract(r"phase=(\w+)")[0]
    tagged = int8["shape"].str.endswith(",weights=int8")
    assert set(phases[tagged]) == {"decode", "generate"} and tagged[phases != "prefill"].all()
    assert not tagged[phases == "prefill"].any()
    # the prefill rows are the same configuration in both runs: the same keys
    key = ["family", "variant", "dtype", "shape"]
    prefill = [set(map(tuple, df.loc[df["shape"].str.contains("phase=prefill"), key].values)) for df in (bf16, int8)]
    assert prefill[0] == prefill[1] and prefill[0]


def test_compare_never_pairs_an_int8_step_with_a_bf16_one(runs):
    done = run_in(runs, "compare", "bf16/results.csv", "int8/results.csv", "--threshold", "999%")
    table = done.stdout
    paired = [line for line in table.splitlines() if "phase=decode" in line and "| same |" in line]
    assert paired == [], table
    assert "only in new" in table and "now missing" in table, table
    assert done.returncode == 1, table  # bf16's decode rows are missing from the int8 run


def test_the_markdown_titles_name_the_decode_weights(runs):
    text = next((runs / "int8").glob("model-*.md")).read_text()
    assert "(bf16, int8 decode weights) on" in text, text[:600]
    plain = next((runs / "bf16").glob("model-*.md")).read_text()
    assert "decode weights" not in plain
    assert "roofs: CPU (measured)\n" in plain, plain[:300]  # the spec's origin said once, not twice
