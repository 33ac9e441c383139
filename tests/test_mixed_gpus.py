"""Rows from several GPUs in one run or one file: each GPU's rows are drawn and reported on that
GPU's own roof, never on the first GPU's."""

from __future__ import annotations

import json

import pytest
from result_factory import CPU, row, run, write

from rooflint.core.specs import get_spec
from rooflint.engine.bench import write_plots
from rooflint.outputs import plot
from rooflint.outputs.merge import merge_files
from rooflint.outputs.report import build_report, write_report


class Drawn(dict):
    """plot_roofline spy: out_base name -> (spec, point labels). Draws for real only when asked
    (matplotlib takes a second or two per plot)."""

    real = False
    titles: dict


@pytest.fixture
def drawn(monkeypatch):
    calls = Drawn()
    calls.titles = {}
    real = plot.plot_roofline

    def spy(points, spec, out_base, title, extra_ceilings=None):
        calls[out_base.name] = (spec, set(points["label"]))
        calls.titles[out_base.name] = title
        return real(points, spec, out_base, title, extra_ceilings) if calls.real else []

    monkeypatch.setattr(plot, "plot_roofline", spy)
    return calls


def test_bench_plots_one_roofline_per_gpu_each_on_its_own_roof(tmp_path, drawn):
    drawn.real = True
    rows = run("h100_sxm") + run("a100_80gb_sxm", slower_gpu=1.6)
    written = write_plots(rows, tmp_path, None, "datasheet", None)
    names = {p.name for p in written}
    for gpu in ("h100_sxm", "a100_80gb_sxm"):
        assert {f"roofline-{gpu}.png", f"roofline-{gpu}.svg", f"roofline-{gpu}.csv"} <= names
        assert (tmp_path / f"roofline-{gpu}.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "roofline.png").exists()  # a single name would hide which GPU it shows
    assert drawn["roofline-h100_sxm"][0] == get_spec("h100_sxm")
    assert drawn["roofline-a100_80gb_sxm"][0] == get_spec("a100_80gb_sxm")
    # Each plot holds its own GPU's four points, not the other's.
    assert len(drawn["roofline-h100_sxm"][1]) == len(drawn["roofline-a100_80gb_sxm"][1]) == 4


def test_bench_plots_a_cpu_run_on_its_measured_ceilings(tmp_path, drawn):
    rows = [row("vector_add", "eager", 50.0, gpu="cpu", spec=CPU)]
    write_plots(rows, tmp_path, None, "datasheet", CPU)
    assert drawn["roofline"][0] is CPU  # one GPU (here the CPU): the plain name roofline.*


def test_report_judges_each_gpu_on_its_own_roof(tmp_path, drawn):
    files = [write(run("h100_sxm"), tmp_path / "h100"), write(run("a100_80gb_sxm", slower_gpu=1.6), tmp_path / "a")]
    report = build_report(merge_files(files).frame, tmp_path / "images")
    sections = {section.gpu: section for section in report["_sections"]}
    assert sections["h100_sxm"].spec == get_spec("h100_sxm")
    assert sections["a100_80gb_sxm"].spec == get_spec("a100_80gb_sxm")
    assert drawn["roofline-h100_sxm"][0].bandwidth_gbps == 3350
    assert drawn["roofline-a100_80gb_sxm"][0].bandwidth_gbps == 2039
    payload = json.loads(write_report(files, "json"))
    ceilings = {g["gpu"]: g["ceilings"]["memory_bandwidth_gbps"] for g in payload["gpus"]}
    assert ceilings == {"h100_sxm": 3350, "a100_80gb_sxm": 2039}
    roofs = {g["gpu"]: g["roofs_tflops"] for g in payload["gpus"]}
    assert roofs == {
        "h100_sxm": {"cuda fp32": get_spec("h100_sxm").cuda_peak_tflops("fp32")},
        "a100_80gb_sxm": {"cuda fp32": get_spec("a100_80gb_sxm").cuda_peak_tflops("fp32")},
    }


def test_roofline_without_gpu_draws_each_gpu_of_the_file_on_its_own_roof(tmp_path, drawn):
    from typer.testing import CliRunner

    from rooflint.cli.app import app

    rows = (
        run("h100_sxm") + run("a100_80gb_sxm", slower_gpu=1.6) + [row("vector_add", "eager", 50.0, gpu="cpu", spec=CPU)]
    )
    results = write(rows, tmp_path / "mixed")
    done = CliRunner().invoke(app, ["roofline", str(results), "--out", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    assert set(drawn) == {"roofline-h100_sxm", "roofline-a100_80gb_sxm", "roofline-cpu"}
    assert drawn["roofline-a100_80gb_sxm"][0] == get_spec("a100_80gb_sxm")  # never projected onto an H100
    assert drawn["roofline-cpu"][0].bandwidth_gbps == CPU.bandwidth_gbps  # the ceilings the CPU rows recorded
    assert len(drawn["roofline-h100_sxm"][1]) == len(drawn["roofline-a100_80gb_sxm"][1]) == 4
    # --gpu still picks one roof, projecting rows measured elsewhere onto it.
    drawn.clear()
    done = CliRunner().invoke(app, ["roofline", str(results), "--gpu", "t4", "--out", str(tmp_path / "t4")])
    assert done.exit_code == 0 and set(drawn) == {"roofline"}  # one roof: the plain name


def test_roofline_draws_rows_whose_gpu_column_is_an_alias_as_measured(tmp_path, drawn):
    from typer.testing import CliRunner

    from rooflint.cli.app import app

    results = write(run("h100"), tmp_path / "alias")  # "h100": an alias of the table's h100_sxm
    done = CliRunner().invoke(app, ["roofline", str(results), "--out", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    spec, labels = drawn["roofline"]  # one GPU: the plain name, as bench gives it
    assert spec == get_spec("h100_sxm") and len(labels) == 4
    assert drawn.titles["roofline"].endswith(": measured")  # not projected onto its own GPU


def test_measured_roof_rows_from_elsewhere_are_drawn_on_the_ceilings_they_recorded(tmp_path, drawn, monkeypatch):
    """--roof measured with a remote fleet: the client has no ceilings file for the workers' GPU.
    The rows recorded the ceilings they were judged on, so the plot uses those instead of failing."""
    monkeypatch.setenv("ROOFLINT_CACHE", str(tmp_path / "empty-cache"))
    rows = run("h100_sxm")
    for r in rows:
        r.ceiling_source, r.bandwidth_gbps = "measured", 3005.0
    write_plots(rows, tmp_path, None, "measured", None)
    assert drawn["roofline"][0].bandwidth_gbps == 3005.0  # not the datasheet's 3350, and no error
