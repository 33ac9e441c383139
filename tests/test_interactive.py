"""The HTML report's interactive roofline, read back from the page: each row's point with its tooltip
and command, positions that follow the log axes and sit on the roof where the row runs at 100%,
rows off the plot with the reason, the energy roofline beside it, ncu links, one roofline per GPU,
and the static image's short legend with labels that do not overlap."""

from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from result_factory import CPU, SOFTMAX_BF16, N, row, run, write
from typer.testing import CliRunner

from rooflint.analysis.lint_input import read_counters
from rooflint.cli.app import app
from rooflint.core.family import Cost
from rooflint.core.specs import get_spec
from rooflint.outputs.merge import merge_files
from rooflint.outputs.plot import draw_roofline
from rooflint.outputs.points import points_from_results
from rooflint.outputs.report import build_report
from rooflint.outputs.report_render import render_html, render_markdown
from rooflint.outputs.results import read_results

runner = CliRunner()
H100 = get_spec("h100_sxm")
FLOOR_MS = 3 * N * 2 / (H100.bandwidth_gbps * 1e9) * 1e3  # vector_add bf16 at exactly 3350 GB/s
KV_COPY = Cost(bytes=2 * 64 * 2**20)  # a cache copy: bytes, no FLOPs
VOID = {"input", "br", "img", "meta", "link", "hr"}


class Page(HTMLParser):
    """Every start tag with its attributes, the plot (svg data-plot) and GPU section it sits in."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[dict[str, str]] = []
        self._open: list[dict[str, str]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        element = dict(attrs, tag=tag)
        for outer in self._open:
            if outer["tag"] == "svg":
                element["plot"] = outer.get("data-plot", "")
            if "roofline-section" in outer.get("class", ""):
                element["gpu"] = outer["data-gpu"]
        self.elements.append(element)
        if tag not in VOID:
            self._open.append(element)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self._open.pop()

    def handle_endtag(self, tag):
        while self._open and self._open.pop()["tag"] != tag:
            pass

    def select(self, cls: str, **where: str) -> list[dict[str, str]]:
        """Elements with class ``cls`` whose attributes match (data_family= means data-family=)."""
        return [
            e
            for e in self.elements
            if cls in e.get("class", "").split() and all(e.get(k.replace("_", "-")) == v for k, v in where.items())
        ]

    def one(self, cls: str, **where: str) -> dict[str, str]:
        [found] = self.select(cls, **where)
        return found


def to_pixels(page: Page, plot: str, ai: float, value: float, gpu: str = "h100_sxm") -> tuple[float, float]:
    """Where (ai, value) must land, from the frame's box and value ranges, by log10 alone."""
    frame = page.one("frame", plot=plot, gpu=gpu)
    (x_lo, x_hi), (y_lo, y_hi) = (map(float, frame[f"data-{a}-range"].split()) for a in "xy")
    left, top, width, height = (float(frame[k]) for k in ("x", "y", "width", "height"))
    x = left + math.log10(ai / x_lo) / math.log10(x_hi / x_lo) * width
    y = top + height - math.log10(value / y_lo) / math.log10(y_hi / y_lo) * height
    return x, y


def on_polyline(polyline: dict[str, str], x: float, y: float) -> bool:
    """Is (x, y) on the drawn roof (within the 0.1-unit rounding of the SVG)? Straight in log-log, so
    straight in pixels."""
    corners = [tuple(map(float, p.split(","))) for p in polyline["points"].split()]
    for (x0, y0), (x1, y1) in zip(corners, corners[1:]):
        if x0 <= x <= x1:
            return abs(y0 + (y1 - y0) * (x - x0) / (x1 - x0) - y) < 0.3
    return False


def with_energy(result, power_w: float):
    """NVML's view of a row: power_w for the whole timed call."""
    joules = power_w * result.median_ms / 1e3
    result.power_median_w, result.energy_per_call_j = power_w, joules
    result.flop_per_j = (result.tensor_flops + result.cuda_flops) / joules
    result.bytes_per_j = result.ideal_bytes / joules
    return result


@pytest.fixture
def page(tmp_path) -> tuple[Page, str]:
    rows = [
        row("vector_add", "eager", FLOOR_MS, lint="warning:noisy"),  # at 100% of the bandwidth roof
        row("vector_add", "triton", 0.55),
        row("softmax", "triton", 0.09, cost=SOFTMAX_BF16, shape="M=4096,N=8192"),
        row("kv_cache", "triton", 0.05, cost=KV_COPY, shape="op=append,seqs=64"),
        row("vector_add", "cuda", status="failed", message="rel error 0.31 > tolerance 0.016"),
    ]
    frame = read_results(write(rows, tmp_path / "run"))
    text = render_html(build_report(frame))
    return Page(text), text


def test_every_row_has_a_point_with_its_numbers_lint_and_command(page):
    page, _ = page
    time = page.select("point", plot="time")
    assert sorted((p["data-family"], p["data-variant"]) for p in time) == [
        ("kv_cache", "triton"),
        ("softmax", "triton"),
        ("vector_add", "eager"),
        ("vector_add", "triton"),
    ]
    triton = page.one("point", plot="time", data_family="vector_add", data_variant="triton")
    assert triton["data-kind"] == "triton" and triton["data-dtype"] == "bf16"
    assert triton["data-title"] == "vector_add / triton"
    tip = triton["data-tip"].splitlines()
    assert tip[0] == f"bf16 · n={N} (large)"
    assert tip[1] == "time 0.55 ms median (p20 0.5445, p80 0.5555)"
    # 3 * 2^28 * 2 bytes in 0.55 ms: 2928 GB/s, 87.4% of 3350 GB/s
    assert tip[2] == "0.488 TFLOP/s · 2928 GB/s · AI 0.1667 FLOP/B"
    assert tip[3] == "87.4% of roof (memory-bound)" and tip[-1] == "lint: no findings"
    assert triton["data-cmd"] == f"rooflint bench vector_add --variants triton --dtype bf16 --size n={N}"
    eager = page.one("point", plot="time", data_family="vector_add", data_variant="eager")
    assert eager["data-tip"].splitlines()[-1] == "lint: warning:noisy"
    assert eager["data-point"] != triton["data-point"]


def test_points_follow_the_log_axes_and_a_row_at_its_roof_sits_on_it(page):
    page, _ = page
    for variant, ms in (("eager", FLOOR_MS), ("triton", 0.55)):
        point = page.one("point", plot="time", data_family="vector_add", data_variant=variant)
        x, y = to_pixels(page, "time", 1 / 6, N / (ms / 1e3) / 1e12)  # one add per 6 bytes
        assert float(point["data-x"]) == pytest.approx(x, abs=0.06)
        assert float(point["data-y"]) == pytest.approx(y, abs=0.06)
    eager = page.one("point", plot="time", data_family="vector_add", data_variant="eager")
    roofs = page.select("roof", plot="time")
    assert len(roofs) == 2  # CUDA cores fp32 and tensor bf16: one bandwidth slope, two flat tops
    assert all(on_polyline(roof, float(eager["data-x"]), float(eager["data-y"])) for roof in roofs)
    triton = page.one("point", plot="time", data_family="vector_add", data_variant="triton")
    assert not on_polyline(roofs[0], float(triton["data-x"]), float(triton["data-y"]))  # 87%: under it


def test_rows_off_the_plot_say_why(page):
    page, text = page
    copy = page.one("point", plot="time", data_family="kv_cache")
    assert "offplot" in copy["class"]
    # Under the x axis, below the frame: AI 0 has no place on a log axis.
    frame = page.one("frame", plot="time")
    assert float(copy["data-y"]) > float(frame["y"]) + float(frame["height"])
    assert "no FLOPs: AI 0 and 0 TFLOP/s lie at minus infinity on log axes" in copy["data-tip"]
    assert "← AI 0: no FLOPs, judged on bandwidth alone" in text
    failed = page.one("offplot-list") and [e for e in page.elements if e.get("data-variant") == "cuda"]
    assert [e["tag"] for e in failed] == ["li"] and failed[0]["data-family"] == "vector_add"
    assert "failed: rel error 0.31 &gt; tolerance 0.016: no trustworthy time, so no point" in text
    # The count: every drawn row (the copy included), none of the failed ones.
    assert re.search(r'<b class="shown">4</b> of <span class="total">4</span> rows shown', text)


def test_filters_are_the_legend(page):
    page, _ = page
    boxes = [e for e in page.elements if e["tag"] == "input" and e.get("data-filter")]
    assert {(b["data-filter"], b["value"]) for b in boxes} == {
        ("family", "vector_add"),
        ("family", "softmax"),
        ("family", "kv_cache"),
        ("kind", "eager"),
        ("kind", "triton"),
        ("kind", "cuda"),
        ("dtype", "bf16"),
    }
    # A family's points share its colour; kinds differ by marker shape (the path drawn).
    fills = {p["data-family"]: p["fill"] for p in page.select("point", plot="time")}
    assert len(set(fills.values())) == 3
    eager, triton = (
        page.one("point", plot="time", data_family="vector_add", data_variant=v) for v in ("eager", "triton")
    )
    assert eager["d"].count("L") == 0 and "h" in eager["d"]  # square
    assert "a" in triton["d"]  # circle


def test_self_contained_nothing_to_fetch(page):
    _, text = page
    scripts = re.findall(r"<script>(.*?)</script>", text, re.S)
    # docs/report.md: about 4.6 KB, no library (5.1 KB since a crowded tooltip counts what it does not name)
    assert len(scripts) == 1 and len(scripts[0].encode()) < 5100
    assert not re.search(r'\b(src|href)="(?!data:|#)', text)
    assert "<script src" not in text and "<link" not in text and "@import" not in text
    assert "http://" not in text and "https://" not in text


def test_energy_roofline_at_the_median_measured_power(tmp_path):
    rows = [
        with_energy(row("vector_add", "eager", FLOOR_MS), 500.0),  # at the time roof, at the median power
        with_energy(row("vector_add", "triton", 0.55), 400.0),
        with_energy(row("softmax", "triton", 0.09, cost=SOFTMAX_BF16, shape="M=4096,N=8192"), 600.0),
        row("softmax", "eager", 0.12, cost=SOFTMAX_BF16, shape="M=4096,N=8192"),  # no NVML reading
    ]
    report = build_report(read_results(write(rows, tmp_path / "run")))
    page = Page(render_html(report))
    text = render_html(report)
    energy = page.select("point", plot="energy")
    assert sorted(p["data-variant"] for p in energy) == ["eager", "triton", "triton"]
    assert "Roofs at the median measured power, 500 W" in text
    assert "1 ok rows have no energy reading and are not drawn here" in text
    roofs = page.select("roof", plot="energy")
    eager = page.one("point", plot="energy", data_family="vector_add", data_variant="eager")
    # FLOP/J of a row at the roof and at 500 W: N FLOPs / (500 W x floor time), in GFLOP/J.
    x, y = to_pixels(page, "energy", 1 / 6, N / (500.0 * FLOOR_MS / 1e3) / 1e9)
    assert (float(eager["data-x"]), float(eager["data-y"])) == pytest.approx((x, y), abs=0.06)
    assert len(roofs) == 2 and all(on_polyline(roof, x, y) for roof in roofs)
    # The tooltip is kept once, on the time plot's twin (same data-point), which the page's script reads.
    assert "data-tip" not in eager
    twin = page.one("point", plot="time", data_family="vector_add", data_variant="eager")
    assert twin["data-point"] == eager["data-point"]
    assert "energy 240 mJ/call · 1.12 GFLOP/J · 6.7 GB/J · 500 W median" in twin["data-tip"]
    # The tables gain the energy columns; the Markdown report too, with the power it was measured at.
    assert "<th>mJ/call</th><th>GFLOP/J</th><th>GB/J</th><th>W</th>" in text
    markdown = render_markdown(report)
    assert "| variant | time ms | TFLOP/s | GB/s | AI | % of roof | bound | vs eager | mJ/call | GFLOP/J |" in markdown
    assert "energy: 3 of 4 ok rows measured by NVML's total-energy counter over their timed calls" in markdown
    assert "median power 500 W" in markdown


def test_no_energy_says_so_instead_of_an_empty_plot(tmp_path):
    rows = [row("vector_add", "eager", 50.0, gpu="cpu", spec=CPU)]
    report = build_report(read_results(write(rows, tmp_path / "cpu")))
    text = render_html(report)
    assert 'data-plot="energy"' not in text
    assert "no energy measured (needs NVML)" in text
    assert "mJ/call" not in text  # no empty energy columns either
    assert "energy: no energy measured (needs NVML)." in render_markdown(report)


def test_counters_link_the_analytic_point_to_the_measured_one(tmp_path):
    results = write(run(), tmp_path / "run")
    ncu = tmp_path / "ncu.csv"
    # ncu counted 1.25x the modelled bytes of softmax/triton: the measured AI is 1/1.25 of the model's.
    ncu.write_text(
        "family,variant,dtype,shape,measured_dram_bytes\n"
        f'softmax,triton,bf16,"M=4096,N=8192",{SOFTMAX_BF16.bytes * 1.25}\n'
        'gelu,triton,bf16,"rows=1,cols=1",1000\n'
    )
    # The command reads them (JSON: no images to draw); the page is rendered from the same counters.
    result = runner.invoke(app, ["report", str(results), "--format", "json", "--counters", str(ncu)])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["summary"]["counters_matched"] == 1
    [softmax] = [f["rows"] for f in payload["gpus"][0]["families"] if f["family"] == "softmax"]
    assert softmax[1]["measured_dram_bytes"] == SOFTMAX_BF16.bytes * 1.25
    page = Page(render_html(build_report(read_results(results), counters=read_counters(ncu))))
    [link] = page.select("link", plot="time")
    [twin] = page.select("ncu", plot="time")
    analytic = page.one("point", plot="time", data_family="softmax", data_variant="triton")
    assert link["data-point"] == twin["data-point"] == analytic["data-point"]
    model_ai = SOFTMAX_BF16.flops / SOFTMAX_BF16.bytes
    x, y = to_pixels(page, "time", model_ai / 1.25, SOFTMAX_BF16.flops / 0.09e-3 / 1e12)
    assert (float(twin["data-x"]), float(twin["data-y"])) == pytest.approx((x, y), abs=0.06)
    assert float(link["x1"]) == pytest.approx(float(analytic["data-x"])) and float(link["x2"]) == pytest.approx(x)
    assert "1.25x the modelled bytes" in twin["data-tip"]
    assert twin["data-cmd"].endswith("--size M=4096,N=8192 --ncu")


def test_several_gpus_get_one_interactive_roofline_each_on_its_own_roof(tmp_path):
    files = [write(run(), tmp_path / "h100"), write(run("a100_80gb_sxm", slower_gpu=1.6), tmp_path / "a100")]
    text = render_html(build_report(merge_files(files).frame))
    page = Page(text)
    assert {e["data-gpu"] for e in page.select("roofline-section")} == {"h100_sxm", "a100_80gb_sxm"}
    for gpu, bandwidth in (("h100_sxm", 3350), ("a100_80gb_sxm", 2039)):
        assert len(page.select("point", plot="time", gpu=gpu)) == 4
        # The A100's triton is 1.6x slower than the H100's, and equally far under its own roof.
        point = page.one("point", plot="time", gpu=gpu, data_family="vector_add", data_variant="triton")
        x, y = to_pixels(page, "time", 1 / 6, N / (0.55e-3 * (1.6 if gpu != "h100_sxm" else 1)) / 1e12, gpu)
        assert (float(point["data-x"]), float(point["data-y"])) == pytest.approx((x, y), abs=0.06)
        assert f"{bandwidth} GB/s" in text
    assert "<h2>Across GPUs</h2>" in text
    # Data-point ids are unique per GPU, so hovering one row never marks the other GPU's point.
    points = [p["data-point"] for p in page.select("point", plot="time")]
    assert len(set(points)) == len(points)


def test_static_roofline_has_a_short_legend_and_labels_that_do_not_overlap():
    """The H100 reference run: every family's points on log axes, and the cache copies (no FLOPs) listed."""
    frame = read_results(Path(__file__).parents[1] / "reports" / "h100" / "results.csv")
    points = points_from_results(frame)
    fig, _ = draw_roofline(points, H100, "h100")
    try:
        renderer = fig.canvas.get_renderer()
        entries = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
        families = set(points["family"]) - {"kv_cache"}  # the copies are listed, not drawn
        assert set(entries) == families | set(points["kind"])
        # One entry per family and per kind, never one per row (the count grows with the families).
        assert len(entries) == len(set(entries)) < len(points)
        [ax] = fig.axes
        labels = [t for t in ax.texts if t.get_gid() == "point-label"]
        boxes = [t.get_window_extent(renderer) for t in labels]
        frame_box = ax.get_window_extent(renderer)
        assert all(frame_box.x0 <= b.x0 and b.x1 <= frame_box.x1 for b in boxes)
        assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if a.overlaps(b)]
        named = {t.get_text().split(" ")[0] for t in labels}
        assert families <= named  # every family's column carries its name
        assert all(t.get_fontsize() >= 7 for t in labels)
        [off] = [t for t in fig.texts if t.get_gid() == "off-plot"]
        assert "no FLOPs" in off.get_text()
        # One line per shape of the zero-FLOP family, each variant with its GB/s as the CSV records it.
        append = frame[(frame["family"] == "kv_cache") & frame["shape"].str.startswith("op=append")]
        expected = ", ".join(f"{r.variant} {r.achieved_gbps:.0f}" for r in append.itertuples())
        assert f"kv_cache [op=append]: {expected} GB/s" in off.get_text()
    finally:
        plt.close(fig)


def test_html_and_markdown_quote_the_same_median_power_for_an_even_count(tmp_path):
    # Two readings, 400 and 600 W: the median is 500 W. The Markdown note once took the upper
    # middle (600) while the energy plot took the mean of the middle two.
    rows = [
        with_energy(row("vector_add", "eager", FLOOR_MS), 400.0),
        with_energy(row("vector_add", "triton", 0.55), 600.0),
    ]
    report = build_report(read_results(write(rows, tmp_path / "run")))
    assert "Roofs at the median measured power, 500 W" in render_html(report)
    assert "median power 500 W" in render_markdown(report)
