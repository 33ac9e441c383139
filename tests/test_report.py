"""rooflint report in Markdown, HTML and JSON: the content, not just that a file exists."""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path

import pytest
from result_factory import CPU, SOFTMAX_BF16, N, row, run, write
from typer.testing import CliRunner

from rooflint.cli.app import app
from rooflint.core.family import Cost
from rooflint.outputs.report import REPORT_SCHEMA

runner = CliRunner()


@pytest.fixture
def one_gpu(tmp_path):
    rows = run()
    rows[1].lint = "warn:fits-in-l2"
    rows.append(row("vector_add", "cuda", status="failed", message="rel error 0.31 > tolerance 0.016"))
    return write(rows, tmp_path / "h100")


@pytest.fixture
def two_gpus(tmp_path):
    return [write(run(), tmp_path / "h100"), write(run("a100_80gb_sxm", slower_gpu=1.6), tmp_path / "a100")]


def _table_row(text: str, variant: str, section: str = "### vector_add") -> list[str]:
    part = text[text.index(section) :]
    line = next(line for line in part.splitlines() if line.startswith(f"| {variant}"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_markdown_tables_image_and_text_roofline(one_gpu, tmp_path):
    out = tmp_path / "report" / "report.md"
    result = runner.invoke(app, ["report", str(one_gpu), "--out", str(out)])
    # The report is written whole; its exit status says a row did not pass (a crash is a failure
    # in every command that reads it).
    assert result.exit_code == 1, result.output
    assert "failing: 1 row did not pass (1 failed)" in result.stderr
    text = out.read_text()
    assert "5 rows (4 ok, 1 not ok)" in text
    assert "## h100_sxm: NVIDIA H100 SXM5 80GB" in text
    assert "ceilings (datasheet): 3350 GB/s, cuda fp32 67 TFLOP/s" in text
    assert "energy: no energy measured (needs NVML)." in text  # no NVML columns in these rows
    header = "| variant | time ms | TFLOP/s | GB/s | AI | % of roof | bound | vs eager | lint |"
    assert text.count(header) == 2  # vector_add and softmax
    # vector_add/triton: 0.55 ms moves 3 * 2^28 * 2 bytes -> 2928 GB/s, 87.4% of 3350 GB/s, 0.60 / 0.55 = 1.09x
    assert _table_row(text, "triton") == ["triton", "0.55", "0.488", "2928", "0.167", "87.4", "memory", "1.09x"] + [
        "warn:fits-in-l2"
    ]
    failed = _table_row(text, "cuda")
    assert failed[0] == "cuda (failed: rel error 0.31 > tolerance 0.016)" and failed[1:8] == [""] * 7
    assert _table_row(text, "triton", "### softmax")[:2] == ["triton", "0.09"]
    # The PNG is linked relative to the report and exists; the text roofline lists every point.
    link = re.search(r"!\[roofline on h100_sxm\]\(([^)]+)\)", text).group(1)
    assert link == "roofline.png" and (out.parent / link).read_bytes()[:4] == b"\x89PNG"
    assert "```text" in text and "TFLOP/s (y) against arithmetic intensity" in text
    for letter, label in zip("ABCD", ["vector_add/eager", "vector_add/triton", "softmax/eager", "softmax/triton"]):
        assert f"{letter}  {label} bf16: AI" in text
    assert "vector_add/cuda" not in text  # a failed variant is never a point


def test_markdown_to_stdout_for_a_job_summary(one_gpu):
    result = runner.invoke(app, ["report", str(one_gpu), "--format", "md"])
    assert result.exit_code == 1  # one row failed its check: the summary is still all written
    assert result.stdout.startswith("# rooflint report")
    assert "![roofline" not in result.stdout  # no file to link when writing to stdout
    assert "```text" in result.stdout  # but the text roofline is there


def test_several_gpus_get_a_table_across_and_one_roofline_each(two_gpus, tmp_path):
    out = tmp_path / "r" / "report.md"
    assert runner.invoke(app, ["report", *map(str, two_gpus), "--out", str(out)]).exit_code == 0
    text = out.read_text()
    assert "## Across GPUs" in text
    assert "| family | variant | dtype | shape | a100_80gb_sxm | h100_sxm |" in text
    # 0.55 ms on the H100 is 87% of its roof; 1.6x slower on the A100 is 0.88 ms and 89.8% of 2039 GB/s.
    assert "| vector_add | triton | bf16 | `n=268435456` | 0.88 (90%) | 0.55 (87%) |" in text
    assert "## a100_80gb_sxm: NVIDIA A100 80GB SXM4" in text and "## h100_sxm:" in text
    assert (out.parent / "roofline-h100_sxm.png").exists() and (out.parent / "roofline-a100_80gb_sxm.png").exists()
    assert text.count("```text") == 2


def test_html_is_self_contained_and_sortable(two_gpus, tmp_path):
    out = tmp_path / "site" / "index.html"
    assert runner.invoke(app, ["report", *map(str, two_gpus), "--format", "html", "--out", str(out)]).exit_code == 0
    page = out.read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 2 and all(base64.b64decode(i)[:4] == b"\x89PNG" for i in images)
    assert not re.search(r'src="(?!data:)', page)  # nothing to fetch: no external file or URL
    assert page.count('<table class="sortable">') == 5  # across GPUs + 2 families x 2 GPUs
    assert 'addEventListener("click"' in page and "<script>" in page
    assert '<td data-v="0.55">0.55</td>' in page  # raw value kept for numeric sorting
    assert "<h2>Across GPUs</h2>" in page
    assert page.count('<div class="roofline-section"') == 2  # one interactive roofline per GPU


def test_json_has_a_versioned_schema_and_the_numbers(two_gpus, tmp_path):
    result = runner.invoke(app, ["report", *map(str, two_gpus), "--format", "json"])
    assert result.exit_code == 0
    payload = json.loads(result.output)
    assert payload["schema"] == REPORT_SCHEMA == "rooflint.report/1"
    assert payload["summary"] == {"rows": 8, "ok": 8, "not_ok": 0, "gpus": ["a100_80gb_sxm", "h100_sxm"]}
    h100 = next(g for g in payload["gpus"] if g["gpu"] == "h100_sxm")
    assert h100["ceilings"]["memory_bandwidth_gbps"] == 3350
    assert h100["roofs_tflops"] == {"cuda fp32": 67}
    rows = {f["family"]: f["rows"] for f in h100["families"]}
    triton = next(r for r in rows["vector_add"] if r["variant"] == "triton")
    assert triton["median_ms"] == 0.55
    assert triton["pct_of_roof"] == pytest.approx(100 * 3 * 2**29 / 3350e9 / 0.55e-3)
    assert triton["speedup_vs_eager"] == pytest.approx(0.60 / 0.55)
    assert triton["lint"] == ""
    across = {(a["family"], a["variant"]): a["by_gpu"] for a in payload["across_gpus"]}
    assert across[("softmax", "eager")]["a100_80gb_sxm"]["median_ms"] == pytest.approx(0.192)


def test_json_nulls_for_missing_numbers_and_cpu_ceilings_from_rows(tmp_path):
    rows = [
        row("vector_add", "eager", 50.0, gpu="cpu", spec=CPU),
        row("vector_add", "triton", gpu="cpu", spec=CPU, status="skipped", message="needs a CUDA GPU"),
    ]
    out = tmp_path / "r.json"
    args = ["report", str(write(rows, tmp_path / "cpu")), "--format", "json", "--out", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    payload = json.loads(out.read_text())
    cpu = payload["gpus"][0]
    assert cpu["gpu"] == "cpu" and cpu["ceiling_source"] == "measured"
    assert cpu["ceilings"]["memory_bandwidth_gbps"] == 20.0  # rebuilt from the rows' own ceilings
    skipped = cpu["families"][0]["rows"][1]
    assert skipped["status"] == "skipped" and skipped["median_ms"] is None and skipped["message"] == "needs a CUDA GPU"
    assert not any(isinstance(v, float) and math.isnan(v) for v in skipped.values())
    assert (tmp_path / "roofline.png").exists()  # one GPU: the name bench gives it


def test_bad_format_and_bad_file(one_gpu, tmp_path):
    bad = runner.invoke(app, ["report", str(one_gpu), "--format", "pdf"])
    assert bad.exit_code == 2 and "valid: md, html, json" in bad.output
    missing = runner.invoke(app, ["report", str(tmp_path / "none.csv")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_example_workflow_uses_only_real_commands_and_options():
    import typer

    group = typer.main.get_command(app)
    workflow = (Path(__file__).parents[1] / "examples" / "github-actions" / "rooflint.yml").read_text()
    code = "\n".join(line.split("#")[0] for line in workflow.splitlines())  # comments are prose
    calls = re.findall(r"\brooflint (\w+)([^|>\n]*)", code)
    assert {name for name, _ in calls} >= {"bench", "lint", "compare", "report"}
    for name, args in calls:
        assert name in group.commands, name
        known = {opt for param in group.commands[name].params for opt in param.opts}
        for option in re.findall(r"--[a-z][a-z-]*", args):
            assert option in known, f"rooflint {name} has no {option}"


def test_dtype_column_appears_when_a_family_mixes_dtypes(tmp_path):
    fp32 = Cost(cuda_flops=N, bytes=3 * N * 4)  # the same add on 4-byte elements
    rows = run()[:2] + [row("vector_add", "triton", 1.0, dtype="fp32", cost=fp32)]
    text = runner.invoke(app, ["report", str(write(rows, tmp_path / "r"))]).output
    assert "| variant | dtype | time ms |" in text
    assert "| triton | fp32 | 1 | 0.268 | 3221 |" in text  # 3 * 2^28 * 4 bytes in 1 ms
    assert "B  vector_add/triton bf16: AI" in text and "C  vector_add/triton fp32: AI" in text


def test_kernels_are_also_judged_against_the_fastest_compiled_form(tmp_path):
    # Two natural ways to compile softmax: the unfused form (0.567 ms on an H100) and the built-in
    # op (0.378 ms). Triton at 0.352 ms is 1.07x the best of them, not 1.61x the weakest.
    softmax = {"family": "softmax", "cost": SOFTMAX_BF16, "shape": "M=4096,N=8192"}
    rows = [
        row(variant="eager", median_ms=0.49, **softmax),
        row(variant="compile_unfused", kind="compile", median_ms=0.567, **softmax),
        row(variant="compile_builtin", kind="compile", median_ms=0.378, **softmax),
        row(variant="triton", median_ms=0.352, **softmax),
        row(variant="cuda", median_ms=0.352, status="failed", message="rel error 0.3", **softmax),
        *run()[:2],  # vector_add: no compiled variant, so no such column in its table
    ]
    payload = json.loads(runner.invoke(app, ["report", str(write(rows, tmp_path / "r")), "--format", "json"]).stdout)
    [section] = payload["gpus"]
    by_variant = {r["variant"]: r for f in section["families"] if f["family"] == "softmax" for r in f["rows"]}
    assert by_variant["triton"]["speedup_vs_best_compile"] == pytest.approx(0.378 / 0.352)
    assert by_variant["compile_unfused"]["speedup_vs_best_compile"] == pytest.approx(0.378 / 0.567)
    assert by_variant["cuda"]["speedup_vs_best_compile"] is None  # failed: no time to compare
    text = runner.invoke(app, ["report", str(tmp_path / "r" / "results.csv")]).stdout
    assert _table_row(text, "triton", "### softmax")[8] == "1.07x"
    assert "vs best compile" in text[text.index("### softmax") :].splitlines()[2]
    assert "vs best compile" not in text[text.index("### vector_add") :].splitlines()[2]


def test_the_roofs_come_in_one_order_whatever_the_hash_seed(tmp_path):
    # The text roofline draws the roofs in this order, one over another where they meet; they came
    # from a set of strings, so the same file rendered differently from one process to the next.
    rows = [*run(), row("attention", "eager", 1.6, cost=Cost(tensor_flops=1.1e12, cuda_flops=3e9, bytes=2e8))]
    rows[-1].compute_unit, rows[-1].precision = "tensor", "bf16"
    payload = json.loads(runner.invoke(app, ["report", str(write(rows, tmp_path / "r")), "--format", "json"]).stdout)
    roofs = list(payload["gpus"][0]["roofs_tflops"])
    assert roofs == sorted(roofs) and {"cuda fp32", "tensor bf16"} <= set(roofs)
