"""report and roofline, run as a user runs them: the installed console script in a subprocess. Each
case is a bug found that way: a folder given as the report drawing over the rooflines beside it,
a burst run merged with a sustained one shown as two rows that read alike, a results file named
with a backtick breaking the report's first line, a name with a newline splitting the text legend.
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

from console_script import assert_refused, needs_console_script, run_in
from result_factory import row, write

pytestmark = needs_console_script


def rooflint(*argv, tmp_path: Path) -> subprocess.CompletedProcess:
    return run_in(tmp_path, *argv, timeout=120)


def test_a_report_out_that_is_a_folder_is_refused_before_drawing_over_its_parent(tmp_path):
    # `report --out adir` drew roofline.png/.svg/.csv into adir's parent, over the user's own, and only
    # then failed to write the report over the folder.
    results = write([row("vector_add", "triton", 1.0)], tmp_path / "run")
    (tmp_path / "adir").mkdir()
    (tmp_path / "roofline.png").write_text("mine")
    for out, said in (("adir", "is a directory"), ("adir/", "names a folder"), (".", "is a directory")):
        done = rooflint("report", results, "--format", "md", "--out", out, tmp_path=tmp_path)
        assert_refused(done, said)
    assert (tmp_path / "roofline.png").read_text() == "mine"
    assert not (tmp_path / "roofline.svg").exists() and not (tmp_path / "roofline.csv").exists()
    assert list((tmp_path / "adir").iterdir()) == []


def test_burst_and_sustained_rows_of_one_variant_are_told_apart(tmp_path):
    # A burst run merged with a sustained one showed each variant twice with nothing between them
    # but the numbers; the table across GPUs kept one regime's time and dropped the other's.
    results = write(
        [
            row("vector_add", "triton", 1.0, regime="burst"),
            row("vector_add", "triton", 2.0, regime="sustained"),
            row("vector_add", "triton", 3.0, gpu="a100_80gb_sxm", regime="burst"),
        ],
        tmp_path / "run",
    )
    done = rooflint("report", results, "--format", "md", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "| vector_add | triton | bf16 | `n=268435456` | burst | 3 (26%) | 1 (48%) |" in lines
    assert "| vector_add | triton | bf16 | `n=268435456` | sustained |  | 2 (24%) |" in lines
    assert "| variant | regime | time ms | TFLOP/s | GB/s | AI | % of roof | bound | vs eager | lint |" in lines
    assert any(line.startswith("| triton | burst | 1 |") for line in lines)
    assert any(line.startswith("| triton | sustained | 2 |") for line in lines)
    assert "vector_add/triton bf16 (sustained): AI" in done.stdout  # the text roofline's legend

    done = rooflint("report", results, "--format", "json", tmp_path=tmp_path)
    report = json.loads(done.stdout)
    h100 = next(g for g in report["gpus"] if g["gpu"] == "h100_sxm")
    assert [(r["regime"], r["median_ms"]) for r in h100["families"][0]["rows"]] == [("burst", 1.0), ("sustained", 2.0)]
    across = {a["regime"]: a["by_gpu"]["h100_sxm"]["median_ms"] for a in report["across_gpus"]}
    assert across == {"burst": 1.0, "sustained": 2.0}

    done = rooflint("roofline", results, "--out", "plots", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(tmp_path / "plots" / "roofline-h100_sxm.csv", newline="") as handle:
        labels = [r["label"] for r in csv.DictReader(handle) if r["point_kind"] == "measured"]
    assert labels == ["vector_add/triton bf16 (burst)", "vector_add/triton bf16 (sustained)"]


def test_a_results_file_named_with_a_backtick_keeps_its_name_in_the_report(tmp_path):
    # The Markdown line `we`ird.csv` ended its code span at the name's backtick; the HTML dropped it.
    folder = tmp_path / "we`ird"
    write([row("vector_add", "triton", 1.0)], folder)
    results = folder / "results.csv"
    done = rooflint("report", results, "--format", "md", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"1 rows (1 ok, 0 not ok) from `` {results.as_posix()} ``." in done.stdout.splitlines()
    done = rooflint("report", results, "--format", "html", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"<p>1 rows (1 ok, 0 not ok) from {results.as_posix()}.</p>" in done.stdout


def test_a_name_with_a_newline_keeps_its_text_roofline_legend_on_one_line(tmp_path):
    results = write([row("vector_add", "two\nlines", 1.0, kind="triton")], tmp_path / "run")
    done = rooflint("report", results, "--format", "md", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "A  vector_add/two lines bf16: AI 0.167 FLOP/B, 0.268 TFLOP/s, 1611 GB/s" in done.stdout.splitlines()
