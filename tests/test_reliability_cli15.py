"""`rooflint report`, `roofline`, `doctor` and `ceilings` run as a user runs them (the installed console
script in a subprocess). Each case is a bug found that way: a GPU named with a path separator in a
results file wrote its rooflines into a subfolder (and "../" out of the folder the caller named), a
GPU named with a space or a quote left the Markdown report's image link broken (the rest of the name
raw text, a <tag> in it HTML), and a report or roofline refused for its input left behind the empty
output folder it had created before reading it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest
from console_script import assert_refused, needs_console_script, run_in
from result_factory import CPU, row, write

from rooflint.core.specs import get_spec
from rooflint.outputs.results import SKIPPED

H100 = get_spec("h100_sxm")


def rooflint(*argv, tmp_path: Path) -> subprocess.CompletedProcess:
    return run_in(tmp_path, *argv)


def two_gpus(tmp_path: Path, other: str) -> Path:
    """A results file with vector_add timed on an H100 and on a GPU called ``other`` (H100 ceilings)."""
    rows = [row("vector_add", "eager", 0.60), row("vector_add", "eager", 0.70, gpu=other, spec=H100)]
    return write(rows, tmp_path / "in")


def files_under(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


@needs_console_script
def test_a_gpu_named_with_a_path_separator_keeps_its_rooflines_in_the_folder_named(tmp_path):
    # The gpu column named the file: out/roofline-../../../escaped.png is roofline-.. (a folder it
    # made), up twice to out/ and once more, into the folder above it.
    results = two_gpus(tmp_path, "../../../escaped")
    before = files_under(tmp_path)
    done = rooflint("report", results, "--format", "md", "--out", "out/report.md", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    new = files_under(tmp_path) - before
    assert all(name.startswith("out/") and name.count("/") == 1 for name in new), sorted(new)
    assert "out/roofline-..~2f~..~2f~..~2f~escaped.png" in new and "out/roofline-h100_sxm.png" in new
    links = re.findall(r"!\[[^\]]*\]\(([^)]*)\)", (tmp_path / "out" / "report.md").read_text())
    assert sorted(links) == ["roofline-..~2f~..~2f~..~2f~escaped.png", "roofline-h100_sxm.png"]

    # `rooflint roofline` names its files the same way.
    done = rooflint("roofline", results, "--out", "plots", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert files_under(tmp_path / "plots") == {
        f"roofline-{name}.{ext}" for name in ("..~2f~..~2f~..~2f~escaped", "h100_sxm") for ext in ("png", "svg", "csv")
    }
    assert files_under(tmp_path) - before - new == {f"plots/{name}" for name in files_under(tmp_path / "plots")}


@needs_console_script
def test_the_markdown_image_link_of_a_gpu_named_with_a_space_and_quotes_shows_its_png(tmp_path):
    # `![roofline on x](roofline-my "gpu" <b>.png)`: CommonMark ends the destination at the space and
    # reads "gpu" as a title, so there was no image, and <b> was raw HTML in the summary.
    results = two_gpus(tmp_path, 'my "gpu" <b>')
    done = rooflint("report", results, "--format", "md", "--out", "out/report.md", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "out" / "report.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]*)\)", text)
    assert len(links) == 2 and all(re.fullmatch(r"[\w.~%-]+\.png", link) for link in links), links
    assert {unquote(link) for link in links} == {'roofline-my "gpu" <b>.png', "roofline-h100_sxm.png"}
    assert all((tmp_path / "out" / unquote(link)).is_file() for link in links)
    assert "<b>" not in text


def _skipped_only(tmp_path: Path) -> Path:
    # as a CPU run writes them: no ceilings on a row never timed, so no GPU to draw
    rows = [row("vector_add", "triton", status=SKIPPED, message="needs a CUDA GPU", gpu="cpu", spec=CPU)]
    return write(rows, tmp_path / "in")


def _header_only(tmp_path: Path) -> Path:
    path = write([row("vector_add", "eager", 0.6)], tmp_path / "in")
    path.write_text(path.read_text().splitlines()[0] + "\n")
    return path


# (arguments, what the error line says); {results} is a real results file, {skipped} one of skipped
# rows only, {empty} one with a header and no rows.
REFUSED = {
    "report-format": (["report", "{results}", "--format", "pdf", "--out", "new/sub/report.pdf"], "valid: md, html"),
    "report-missing": (["report", "nosuch.csv", "--format", "html", "--out", "new/report.html"], "does not exist"),
    "report-counters": (["report", "{results}", "--counters", "nosuch.csv", "--out", "new/r.md"], "does not exist"),
    "report-no-rows": (["report", "{empty}", "--out", "new/sub/report.md"], "no result rows"),
    "roofline-gpu": (["roofline", "--gpu", "nosuch", "--out", "new/sub"], "unknown GPU 'nosuch'"),
    "roofline-missing": (["roofline", "nosuch.csv", "--out", "new"], "does not exist"),
    "roofline-none-timed": (["roofline", "{skipped}", "--out", "new"], "no row was timed"),
}


@needs_console_script
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_report_or_roofline_refused_for_its_input_leaves_no_empty_output_folder(tmp_path, case):
    # The output folder was created (to prove it writable) before the format, the results or the
    # GPU were checked, and stayed behind, empty, when they were refused.
    argv, expected = REFUSED[case]
    files = {"results": lambda: write([row("vector_add", "eager", 0.6)], tmp_path / "in")}
    files |= {"skipped": lambda: _skipped_only(tmp_path), "empty": lambda: _header_only(tmp_path)}
    argv = [str(files[arg[1:-1]]()) if arg[1:-1] in files and arg.startswith("{") else arg for arg in argv]
    done = rooflint(*argv, tmp_path=tmp_path)
    assert_refused(done, expected)
    assert not (tmp_path / "new").exists()
