"""Screenshot of an HTML report's interactive roofline with a tooltip showing, in headless Chromium.

    python scripts/report_screenshot.py reports/h100/report/index.html reports/h100/report-tooltip.png
    python scripts/report_screenshot.py r.html out.png --point attention/triton --width 1500

Needs Debian's `chromium` and `chromium-driver` (apt-get install -y chromium chromium-driver) and
the `selenium` package. Selenium is pointed at the installed chromedriver, so Selenium Manager never
downloads a browser or a driver. tests/test_report_browser.py drives the report through these
functions too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DEFAULT_POINT = "attention/eager_unfused"  # apart from the crowd, with a lint finding in the H100 run


def find_browser() -> tuple[str, str]:
    """(browser, chromedriver) paths, or RuntimeError saying what is missing and how to install it."""
    browser = os.environ.get("ROOFLINT_CHROMIUM") or next(filter(None, map(shutil.which, BROWSERS)), None)
    driver = os.environ.get("ROOFLINT_CHROMEDRIVER") or shutil.which("chromedriver")
    if not browser or not driver:
        missing = " and ".join(n for n, p in (("chromium", browser), ("chromedriver", driver)) if not p)
        raise RuntimeError(f"no {missing} on PATH (apt-get install -y chromium chromium-driver)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        raise RuntimeError("the selenium package is not installed (pip install selenium)") from None
    return browser, driver


def open_browser(width: int = 1400, height: int = 1000, network_log: bool = False):
    """Headless Chromium under Selenium, with the locally installed driver (nothing is downloaded).
    ``network_log`` records every request the page makes (browser.get_log("performance"))."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = find_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    # --no-sandbox: CI containers run as root, where Chromium's sandbox refuses to start.
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    if network_log:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


def point(browser, family: str, variant: str, plot: str = "time"):
    """The point element of one row on the first GPU's roofline of the page."""
    from selenium.webdriver.common.by import By

    selector = f'svg[data-plot="{plot}"] .point[data-family="{family}"][data-variant="{variant}"]'
    return browser.find_element(By.CSS_SELECTOR, selector)


def hover(browser, element) -> str:
    """Move the mouse onto ``element``; returns the tooltip's text."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    ActionChains(browser).move_to_element(element).perform()
    return browser.find_element(By.ID, "rooflint-tip").text


def screenshot(report: Path, out: Path, where: str = DEFAULT_POINT, width: int = 1400, height: int = 1080) -> str:
    """Open the report, hover ``where`` (family/variant), save the window as a PNG; returns the tooltip."""
    family, _, variant = where.partition("/")
    browser = open_browser(width, height)
    try:
        browser.get(Path(report).resolve().as_uri())
        # The GPU's heading, its filters and both plots in view, then the mouse onto the point.
        heading = browser.find_element("css selector", ".roofline-section").find_element("xpath", "preceding::h2[1]")
        browser.execute_script("arguments[0].scrollIntoView({block: 'start'});", heading)
        from selenium.common.exceptions import NoSuchElementException
        from selenium.webdriver.common.action_chains import ActionChains

        try:
            element = point(browser, family, variant)
        except NoSuchElementException:  # not in this run: the first point of the first GPU instead
            element = browser.find_element("css selector", 'svg[data-plot="time"] .point')

        ActionChains(browser).move_to_element(element).perform()
        tip = browser.find_element("id", "rooflint-tip").text
        out.parent.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(out))
        return tip
    finally:
        browser.quit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="the HTML report (rooflint report ... --format html)")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--point", default=DEFAULT_POINT, help=f"family/variant to hover (default {DEFAULT_POINT})")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1080)
    args = parser.parse_args(argv)
    if not args.report.is_file():
        print(f"no report at {args.report}", file=sys.stderr)
        return 2
    try:
        tip = screenshot(args.report, args.out, args.point, args.width, args.height)
    except RuntimeError as error:
        print(f"cannot take the screenshot: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}; tooltip:\n{tip}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
