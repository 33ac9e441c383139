"""The HTML report in a real browser: headless Chromium (Debian's chromium and chromium-driver)
driven by Selenium, through the same functions as scripts/report_screenshot.py. Hovering a point
shows its tooltip, a filter hides a family and the count follows, the page fetches nothing, and a
screenshot is saved. Skipped, with the reason, where no browser or driver is installed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from result_factory import SOFTMAX_BF16, row, write
from test_interactive import with_energy

from rooflint.core.family import Cost
from rooflint.outputs.report import build_report
from rooflint.outputs.report_render import render_html
from rooflint.outputs.results import read_results

SCRIPT = Path(__file__).parents[1] / "scripts" / "report_screenshot.py"
spec = importlib.util.spec_from_file_location("report_screenshot", SCRIPT)
shots = importlib.util.module_from_spec(spec)
spec.loader.exec_module(shots)

SOFTMAX = {"cost": SOFTMAX_BF16, "shape": "M=4096,N=8192"}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """Two families, a cache copy with no FLOPs (drawn in the strip) and a failed row (listed only);
    vector_add's two rows with NVML's energy, so the energy roofline holds their twins."""
    where = tmp_path_factory.mktemp("report")
    rows = [
        with_energy(row("vector_add", "eager", 0.60), 500.0),
        with_energy(row("vector_add", "triton", 0.55, lint="warning:fits_in_cache"), 450.0),
        row("softmax", "eager", 0.12, **SOFTMAX),
        row("softmax", "triton", 0.09, **SOFTMAX),
        row("softmax", "compile", 0.30, **SOFTMAX),
        row("kv_cache", "triton", 0.05, cost=Cost(bytes=2**27), shape="op=append"),
        row("vector_add", "cuda", status="failed", message="rel error 0.31 > tolerance 0.016"),
    ]
    page = where / "index.html"
    page.write_text(render_html(build_report(read_results(write(rows, where / "run")))))
    return page


@pytest.fixture(scope="module")
def browser(report):
    try:
        shots.find_browser()
    except RuntimeError as why:
        print(f"skipping the browser tests: {why}")
        pytest.skip(f"no headless browser: {why}")
    driver = shots.open_browser(1300, 900, network_log=True)
    driver.get(report.resolve().as_uri())
    yield driver
    driver.quit()


def _shown(browser) -> tuple[int, int]:
    """(the page's count of shown rows, the time-plot points actually displayed)."""
    from selenium.webdriver.common.by import By

    count = int(browser.find_element(By.CSS_SELECTOR, ".shown").text)
    points = browser.find_elements(By.CSS_SELECTOR, 'svg[data-plot="time"] .point')
    return count, sum(p.is_displayed() for p in points)


def test_hovering_a_point_shows_its_tooltip(browser, tmp_path):
    from selenium.webdriver.common.by import By

    tip = browser.find_element(By.ID, "rooflint-tip")
    assert not tip.is_displayed()
    text = shots.hover(browser, shots.point(browser, "vector_add", "triton"))
    assert tip.is_displayed()
    lines = text.splitlines()
    assert lines[0] == "vector_add / triton"
    assert "time 0.55 ms median (p20 0.5445, p80 0.5555)" in lines
    assert "0.488 TFLOP/s · 2928 GB/s · AI 0.1667 FLOP/B" in lines
    assert "87.4% of roof (memory-bound)" in lines
    assert "lint: warning:fits_in_cache" in lines
    assert "rooflint bench vector_add --variants triton --dtype bf16 --size n=268435456" in lines
    # Its table line lights up with it.
    marked = browser.find_elements(By.CSS_SELECTOR, "tr.hl")
    assert len(marked) == 1 and marked[0].text.startswith("triton")
    shot = tmp_path / "tooltip.png"
    assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:4] == b"\x89PNG"

    # The cache copy sits in the strip under the axis and says why.
    text = shots.hover(browser, shots.point(browser, "kv_cache", "triton"))
    assert "no FLOPs: AI 0 and 0 TFLOP/s lie at minus infinity on log axes" in text


def test_an_energy_point_shows_the_tooltip_its_time_plot_twin_carries(browser):
    # The page keeps each tooltip once, on the time plot's point; the energy twin reads it there.
    energy = shots.point(browser, "vector_add", "triton", plot="energy")
    assert energy.get_attribute("data-tip") is None
    from_energy = shots.hover(browser, energy)
    from_time = shots.hover(browser, shots.point(browser, "vector_add", "triton"))

    # The same title, facts and command; "also here" lists each plot's own neighbours.
    def own(text):
        return [line for line in text.splitlines() if not line.startswith("also here:")]

    assert own(from_energy) == own(from_time) and from_energy.splitlines()[0] == "vector_add / triton"
    assert "rooflint bench vector_add --variants triton" in from_energy


def test_filters_hide_points_and_the_count_follows(browser, tmp_path):
    from selenium.webdriver.common.by import By

    assert _shown(browser) == (6, 6)  # 6 drawn rows; the failed one is only listed
    softmax = browser.find_element(By.CSS_SELECTOR, 'input[data-filter="family"][value="softmax"]')
    softmax.click()
    assert _shown(browser) == (3, 3)
    hidden = browser.find_elements(By.CSS_SELECTOR, '.point[data-family="softmax"]')
    assert hidden and not any(p.is_displayed() for p in hidden)
    kind = browser.find_element(By.CSS_SELECTOR, 'input[data-filter="kind"][value="eager"]')
    kind.click()  # vector_add/eager goes too
    assert _shown(browser) == (2, 2)
    browser.save_screenshot(str(tmp_path / "filtered.png"))
    for button in browser.find_elements(By.CSS_SELECTOR, 'button[data-set="all"]'):
        button.click()
    assert _shown(browser) == (6, 6)


def test_the_page_fetches_nothing(browser, report):
    # Chromium's own network log: every request the page made, files next to it included (data: URIs are not
    # requests). The page itself is the only one.
    messages = [json.loads(entry["message"])["message"] for entry in browser.get_log("performance")]
    requested = {m["params"]["request"]["url"] for m in messages if m["method"] == "Network.requestWillBeSent"}
    assert requested == {report.resolve().as_uri()}


def test_screenshot_script_writes_a_png_with_the_tooltip(report, browser, tmp_path):
    out = tmp_path / "shot.png"
    assert shots.main([str(report), str(out), "--point", "softmax/compile", "--width", "1200", "--height", "800"]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 20_000
