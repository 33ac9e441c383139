"""The commands that read results files, run as a user runs them: the installed console script in a
subprocess. Each case is a bug found that way: merge dropping the columns of a results file that are
not in rooflint's schema (a `measured_dram_bytes` column, a note), so the merged file, and a report of
any file, lost cells that were on disk; lint's title naming the datasheet's ceilings for CPU rows,
which are judged against the ceilings measured at the start of their run; and report showing an ok
row's achieved GB/s or TFLOP/s as written, however far from its own bytes, FLOPs and median time.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from console_script import assert_refused, needs_console_script, run_in
from result_factory import CPU, read_csv, rewritten, row, run, write

pytestmark = needs_console_script

DRAM = ["2147483648", "", "1e9", ""]  # ncu's DRAM bytes of the first run's rows; two rows not profiled
NOTES = ["re-run after driver update", "", "", "odd, see #12"]


def rooflint(*argv, tmp_path: Path) -> subprocess.CompletedProcess:
    return run_in(tmp_path, *argv, timeout=120)


def with_columns(rows: list[dict[str, str]]) -> None:
    for cells, dram, note in zip(rows, DRAM, NOTES):
        cells.update(measured_dram_bytes=dram, note=note)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """An H100 run carrying a measured_dram_bytes and a note column, an A100 run without them, and a
    run of one row with its achieved GB/s edited."""
    folder = tmp_path_factory.mktemp("cli29")
    rewritten(write(run(), folder / "h100"), folder / "profiled.csv", with_columns)
    write(run("a100_80gb_sxm"), folder / "a100")
    return folder


@pytest.fixture(scope="module")
def merged(folder) -> dict[str, subprocess.CompletedProcess]:
    """The two runs merged to CSV and to JSON."""
    return {
        suffix: rooflint("merge", "profiled.csv", "a100/results.csv", "--out", f"merged.{suffix}", tmp_path=folder)
        for suffix in ("csv", "json")
    }


def test_merge_keeps_every_column_of_its_inputs(folder, merged):
    """merge wrote the schema's columns only: the measured_dram_bytes that report and lint read (and
    a column of the user's) were gone from the merged file, with nothing said."""
    for done in merged.values():
        assert done.returncode == 0 and "merged 8 rows from 2 files" in done.stderr, done.stdout + done.stderr
    written = {(r["gpu"], r["family"], r["variant"]): r for r in read_csv(folder / "merged.csv")}
    assert list(next(iter(written.values())))[-2:] == ["measured_dram_bytes", "note"]  # after the schema's
    rows = json.loads((folder / "merged.json").read_text())["rows"]
    from_json = {(r["gpu"], r["family"], r["variant"]): r for r in rows}
    keys = [("h100_sxm", family, variant) for family in ("vector_add", "softmax") for variant in ("eager", "triton")]
    for key, dram, note in zip(keys, DRAM, NOTES):
        for merged_row in (written[key], from_json[key]):
            assert (merged_row["measured_dram_bytes"], merged_row["note"]) == (dram, note), key
    # A row from the file without the columns holds empty cells there.
    assert written[("a100_80gb_sxm", "softmax", "eager")]["measured_dram_bytes"] == ""
    assert from_json[("a100_80gb_sxm", "softmax", "eager")]["note"] == ""


def test_a_report_shows_the_measured_bytes_a_file_carries(folder, merged):
    """report reads through merge: a results file's own measured_dram_bytes ("a results file that
    already carries them keeps them") reached the report as null, for the file and for its merge."""
    for source in ("profiled.csv", "merged.json"):
        done = rooflint("report", source, "--format", "json", tmp_path=folder)
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads(done.stdout)
        measured = {
            (section["gpu"], family["family"], item["variant"]): item["measured_dram_bytes"]
            for section in report["gpus"]
            for family in section["families"]
            for item in family["rows"]
        }
        assert measured[("h100_sxm", "vector_add", "eager")] == 2147483648.0, source
        assert measured[("h100_sxm", "softmax", "eager")] == 1e9, source
        assert measured[("h100_sxm", "vector_add", "triton")] is None, source
        assert report["summary"]["gpus"] == (["a100_80gb_sxm", "h100_sxm"] if source == "merged.json" else ["h100_sxm"])


def one_line(done: subprocess.CompletedProcess) -> str:
    """stdout with rich's wrapping and centring undone."""
    return " ".join(done.stdout.split())


def test_lint_names_the_ceilings_each_row_was_judged_against(tmp_path):
    """lint's title said "datasheet ceilings" for every file, though a CPU row has no datasheet: it is
    judged against the ceilings measured at the start of its run, recorded in the row."""
    cpu = [row("vector_add", variant, 100.0, gpu="cpu", spec=CPU) for variant in ("eager", "triton")]
    clean = write(cpu, tmp_path / "cpu")
    noisy = write([*cpu, row("vector_add", "cuda", 100.0, gpu="cpu", spec=CPU, spread=0.3)], tmp_path / "noisy")
    mixed = write([*cpu, *run()[:2], row("vector_add", "cuda", 0.6, spread=0.3)], tmp_path / "mixed")
    done = rooflint("lint", clean, tmp_path=tmp_path)
    assert done.returncode == 0 and "clean: 2 rows" in done.stdout, done.stdout + done.stderr
    assert "(judged against each row's GPU, measured ceilings)" in one_line(done)
    assert "datasheet" not in done.stdout
    done = rooflint("lint", noisy, tmp_path=tmp_path)
    assert done.returncode == 0 and "noisy" in done.stdout, done.stdout + done.stderr
    assert "noisy/results.csv (judged against each row's GPU, measured ceilings)" in one_line(done)
    assert "datasheet" not in done.stdout
    # GPU rows are judged against --roof's ceilings (the datasheet by default), CPU rows against theirs.
    done = rooflint("lint", mixed, tmp_path=tmp_path)
    assert done.returncode == 0 and "noisy" in done.stdout, done.stdout + done.stderr
    note = "(judged against each row's GPU, datasheet ceilings for h100_sxm, measured ceilings for cpu)"
    assert note in one_line(done)
    # --gpu judges every row, the CPU's too, against that GPU's datasheet.
    done = rooflint("lint", mixed, "--gpu", "h100_sxm", tmp_path=tmp_path)
    assert "(judged against --gpu h100_sxm, datasheet ceilings)" in one_line(done), done.stdout + done.stderr


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return write(run(), tmp_path_factory.mktemp("rates") / "run")


def test_an_achieved_rate_its_row_does_not_give_is_refused_by_every_reader(results):
    """report showed an ok row's achieved_gbps as written: edited from 2928 to 5000 GB/s (past the
    H100's 3350), it was reported as measured, beside the bytes and time that give 2928."""
    folder = results.parent
    bad = rewritten(results, folder / "bad.csv", lambda rows: rows[1].update(achieved_gbps="5000"))
    why = (
        "bad.csv line 3: achieved_gbps 5000 disagrees with its row's ideal_bytes 1.61061e+09 over median_ms 0.55",
        "valid: 2928 GB/s",
    )
    argv = {
        "report": ("report", bad),
        "lint": ("lint", bad),
        "compare": ("compare", results, bad),
        "merge": ("merge", bad, "--out", "m.csv"),
        "roofline": ("roofline", bad, "--out", "plots"),
    }
    for command in argv.values():
        assert_refused(rooflint(*command, tmp_path=folder), *why)
    assert not (folder / "m.csv").exists() and not (folder / "plots").exists()


def test_an_achieved_flop_rate_or_intensity_its_row_does_not_give_is_refused(results):
    folder = results.parent
    tflops = rewritten(results, folder / "tflops.csv", lambda rows: rows[2].update(achieved_tflops="50"))
    done = rooflint("report", tflops, tmp_path=folder)
    assert_refused(done, "line 4: achieved_tflops 50 disagrees with its row's tensor_flops + cuda_flops 1.67772e+08")
    assert "valid: 1.398 TFLOP/s" in done.stderr
    rows = read_csv(results)
    rows[0]["ai_flop_per_byte"] = 3.0  # vector_add: one add per 6 bytes
    ai = folder / "ai.json"
    ai.write_text(json.dumps({"schema_version": 2, "rows": rows}))
    assert_refused(
        rooflint("report", ai, tmp_path=folder),
        "ai.json row 1: ai_flop_per_byte 3 disagrees with its row's tensor_flops + cuda_flops 2.68435e+08 over "
        "ideal_bytes 1.61061e+09; valid: 0.1667 FLOP/byte",
    )


def test_rates_rounded_as_a_spreadsheet_writes_them_are_still_read(results):
    """Rounding is no disagreement: every number of the file cut to four significant digits reads."""
    folder = results.parent

    def rounded(rows):
        for cells in rows:
            for name in ("median_ms", "p20_ms", "p80_ms", "achieved_gbps", "achieved_tflops", "ai_flop_per_byte"):
                cells[name] = f"{float(cells[name]):.4g}"

    done = rooflint("report", rewritten(results, folder / "rounded.csv", rounded), "--format", "json", tmp_path=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    families = json.loads(done.stdout)["gpus"][0]["families"]
    shown = [item["achieved_gbps"] for family in families for item in family["rows"]]
    assert shown == [2684.0, 2928.0, 1118.0, 1491.0]
