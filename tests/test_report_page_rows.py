"""The interactive HTML report, read as a demanding user reads it: a failed or crashed row whose
file still holds numbers is listed as not on the plot, never silently missing; a family whose name
holds a quote or a backslash leaves every data-point one the page's script can select by."""

from __future__ import annotations

import re

from result_factory import row, write
from test_interactive import Page

from rooflint.outputs.report import build_report
from rooflint.outputs.report_render import render_html
from rooflint.outputs.results import read_results


def _page(tmp_path, rows) -> Page:
    return Page(render_html(build_report(read_results(write(rows, tmp_path / "run")))))


def test_a_failed_or_crashed_row_with_numbers_in_its_file_is_listed_off_the_plot(tmp_path):
    # A results file edited by hand, or a row marked failed after it was timed, keeps its numbers:
    # the row gets no point (no trustworthy time), so it must be in the list of rows off the plot.
    crashed = row("vector_add", "cuda", 0.5)
    crashed.status, crashed.message = "crashed", "process died (exit -11)"
    failed = row("vector_add", "triton", 0.4)
    failed.status, failed.message = "failed", "rel error 0.31 > tolerance 0.016"
    page = _page(tmp_path, [row("vector_add", "eager", 0.6), crashed, failed])
    listed = {e["data-variant"] for e in page.elements if e["tag"] == "li" and "data-point" in e}
    assert listed == {"cuda", "triton"}
    assert {e["data-variant"] for e in page.select("point", plot="time")} == {"eager"}


def test_a_family_name_with_quotes_leaves_data_points_a_css_selector_can_hold(tmp_path):
    # The script selects a row's twins by '[data-point="' + id + '"]': a " or \\ in it threw a
    # SyntaxError on every hover of that row, and the highlight stuck.
    names = ["soft\"max's", "back\\slash", "<img src=x onerror=alert(1)>", "vector_add"]
    page = _page(tmp_path, [row(name, "eager", 0.6) for name in names])
    points = [e["data-point"] for e in page.elements if "data-point" in e]
    assert points and all(re.fullmatch(r"[A-Za-z0-9_.~-]+", p) for p in points), points
    on_plot = {e["data-point"] for e in page.select("point", plot="time")}
    on_tables = {e["data-point"] for e in page.elements if e["tag"] == "tr" and "data-point" in e}
    assert on_plot == on_tables and len(on_plot) == len(names)  # one id a row, the same in both places
    assert "g0-vector_add-0" in on_plot  # plain names stay readable
