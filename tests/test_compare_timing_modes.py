"""`rooflint compare` and `rooflint report` never pair a row timed by CUDA-graph replays with one
timed by events (run as a user runs it: the installed console script in a subprocess).

Before, compare joined rows on family, variant, dtype, shape and GPU alone: a `bench --cuda-graphs`
run (time per call without launch gaps or L2 flushes between calls) against an event-timed
reference called every short kernel "faster" and passed, and the other way round failed a CI gate
on "slower" rows whose code never changed. Now such a pair is "other timing", listed and not
compared, and two runs whose timed rows share no timing method are refused."""

from __future__ import annotations

from console_script import assert_refused, needs_console_script, run_in
from result_factory import read_csv, row, run, write

pytestmark = needs_console_script


def graphed(rows):
    """The same rows as `bench --cuda-graphs` would time them: a quarter of the time (no launch gap
    and L2 kept between calls), timing_mode cuda_graph, l2_flushed False."""
    for item in rows:
        item.timing_mode, item.l2_flushed = "cuda_graph", False
        item.median_ms, item.p20_ms, item.p80_ms = item.median_ms / 4, item.p20_ms / 4, item.p80_ms / 4
        # Its rates with it: a rate its row's cost and time do not give is refused by every reader.
        item.achieved_tflops, item.achieved_gbps = item.achieved_tflops * 4, item.achieved_gbps * 4
    return rows


def test_a_graph_timed_row_is_not_compared_with_an_event_timed_one(tmp_path):
    base = write(run(), tmp_path / "base")
    mixed = run()
    graphed(mixed[:2])  # vector_add's two rows re-timed with graphs; softmax's kept
    new = write(mixed, tmp_path / "new")
    for first, second in ((base, new), (new, base)):
        done = run_in(tmp_path, "compare", first, second, "--threshold", "5%")
        out = done.stdout
        assert done.returncode == 0, out + done.stderr
        assert "2 other timing" in out and "2 same" in out, out
        assert "faster" not in out.split("Rule:")[0] and "slower" not in out.split("Rule:")[0], out
        lines = [line for line in out.splitlines() if "vector_add" in line]
        assert len(lines) == 2 and all("other timing: cuda_" in line for line in lines), out


def test_a_real_slowdown_beside_other_timings_still_fails(tmp_path):
    base = write(run(), tmp_path / "base")
    new_rows = run(scale=1.5)  # triton 50% slower, events both sides for softmax
    graphed(new_rows[:2])
    new = write(new_rows, tmp_path / "new")
    done = run_in(tmp_path, "compare", base, new, "--threshold", "5%")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 slower" in done.stdout and "2 other timing" in done.stdout, done.stdout


def test_two_runs_timed_in_no_common_way_are_refused(tmp_path):
    base = write(run(), tmp_path / "base")
    new = write(graphed(run()), tmp_path / "new")
    done = run_in(tmp_path, "compare", base, new)
    assert_refused(done, "timed by cuda_events", "cuda_graph", "--cuda-graphs")


def test_a_file_without_timing_modes_still_compares(tmp_path):
    """Files written before the column (or hand-made without it) pair as before: an empty mode
    agrees with any."""
    rows = run()
    for item in rows:
        item.timing_mode = ""
    base = write(rows, tmp_path / "base")
    new = write(graphed(run()), tmp_path / "new")
    done = run_in(tmp_path, "compare", base, new, "--threshold", "5%")
    assert "other timing" not in done.stdout and "faster" in done.stdout, done.stdout


def test_a_failed_row_is_still_a_failure_whatever_its_timing(tmp_path):
    base = write(run(), tmp_path / "base")
    rows = graphed(run())
    rows[1] = row("vector_add", "triton", status="crashed", message="worker died")
    new = write([*rows[:2], *run()[2:]], tmp_path / "new")
    done = run_in(tmp_path, "compare", base, new)
    assert done.returncode == 1, done.stdout
    assert "now crashed" in done.stdout, done.stdout


def test_report_judges_a_graph_timed_row_only_against_graph_timed_baselines(tmp_path):
    """report's "vs eager" took the eager row of the same key whatever its timing: a graph-timed
    triton row over an event-timed eager one read 1.09x for the method's sake. Now it is blank, and
    a graph-timed eager row is its baseline."""
    rows = run()
    rows[1].timing_mode, rows[1].speedup_vs_eager = "cuda_graph", float("nan")  # vector_add triton
    done = run_in(tmp_path, "report", write(rows, tmp_path / "mixed"))
    assert done.returncode == 0, done.stderr
    # the family's rows timed both ways: its table says which is which
    triton = [line for line in done.stdout.splitlines() if line.startswith("| triton | cuda_graph | 0.55 |")]
    assert len(triton) == 1 and triton[0].split("|")[9].strip() == "", triton
    rows[0].timing_mode = "cuda_graph"  # the eager row graph-timed too: the same way again
    done = run_in(tmp_path, "report", write(rows, tmp_path / "graphed"))
    triton = [line for line in done.stdout.splitlines() if line.startswith("| triton | 0.55 |")]
    assert triton[0].split("|")[8].strip() == "1.09x", triton


def test_merge_keeps_an_event_timed_row_and_a_graph_timed_row_of_one_key(tmp_path):
    """merge kept one row per key and regime, the newest: merging a `--cuda-graphs` run into an
    event-timed one replaced every event-timed row, and the numbers it held were lost."""
    timed = [run(), graphed(run())]
    for rows in timed:
        for item in rows:
            item.regime = "burst"  # as bench writes every timed row
    events, graphs = write(timed[0], tmp_path / "events"), write(timed[1], tmp_path / "graphs")
    merged = tmp_path / "merged.csv"
    done = run_in(tmp_path, "merge", events, graphs, "--out", merged)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = read_csv(merged)
    assert len(rows) == 8, rows
    assert sorted(r["timing_mode"] for r in rows) == ["cuda_events"] * 4 + ["cuda_graph"] * 4
    # the merged file against the events run: every event-timed row the same, the graph rows only in new
    done = run_in(tmp_path, "compare", events, merged)
    assert done.returncode == 0, done.stdout
    assert "4 same" in done.stdout and "4 only in new" in done.stdout, done.stdout
