"""The HTML report's tooltip in a crowd, in headless Chromium (as tests/test_report_browser.py;
skipped, saying why, where no browser or driver is installed): a point with a hundred others on it
names a few and counts the rest, so the tooltip still fits the window and its numbers show."""

from __future__ import annotations

import pytest
from result_factory import row, write
from test_report_browser import shots

from rooflint.outputs.interactive import NEAR_NAMES
from rooflint.outputs.report import build_report
from rooflint.outputs.report_render import render_html
from rooflint.outputs.results import read_results

CROWD = 100  # rows at the same time, so at the same place on the roofline


def test_a_crowded_point_s_tooltip_names_a_few_and_counts_the_rest(tmp_path):
    try:
        shots.find_browser()
    except RuntimeError as why:
        pytest.skip(f"no headless browser: {why}")
    from selenium.webdriver.common.by import By

    rows = [row("vector_add", f"v{i}", 0.6, shape=f"n={i}") for i in range(CROWD)]
    page = tmp_path / "index.html"
    page.write_text(render_html(build_report(read_results(write(rows, tmp_path / "run")))))
    browser = shots.open_browser(1300, 700)
    try:
        browser.get(page.resolve().as_uri())
        text = shots.hover(browser, shots.point(browser, "vector_add", "v0"))
        near = browser.find_element(By.CSS_SELECTOR, "#rooflint-tip .tip-near").text
        height = browser.execute_script("return [document.getElementById('rooflint-tip').offsetHeight, innerHeight]")
    finally:
        browser.quit()
    assert "time 0.6 ms median" in text
    # NEAR_NAMES names, then "; and N more" for the other rows under the mouse
    assert near.count(";") == NEAR_NAMES and near.endswith(f"and {CROWD - 1 - NEAR_NAMES} more"), near
    assert height[0] < height[1] / 2, height
