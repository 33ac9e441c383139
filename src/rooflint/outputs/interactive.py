"""The interactive roofline of the HTML report: inline SVG drawn here and a small inline script.

Per GPU: filters (family, variant kind, dtype) that are also the legend (families by colour, kinds
by marker), the time roofline (TFLOP/s against arithmetic intensity), the energy roofline beside
it (GFLOP/J against the same intensity), and every row that cannot sit on log axes, with the
reason. No plotting library and no network: the coordinates are computed here (log10 of the
value, scaled to the frame) and each tooltip rides in its point's data-* attributes: once, on the time
plot's point; the energy plot's twin of a point reads it from there (with hundreds of rows the
tooltips are most of the page's bytes).

Each point is an SVG element with class "point" and data-family, data-variant, data-kind and
data-dtype, so a browser test can find it; data-point ties it to its table row and to its twin
in the other plot.
"""

from __future__ import annotations

import html
import math
import re
import shlex
import statistics
from dataclasses import dataclass
from typing import Any

from rooflint.core.fmt import finite, text
from rooflint.outputs.points import KIND_MARKERS, ceilings_for, family_colours
from rooflint.outputs.results import OK

WIDTH, HEIGHT = 620, 430  # SVG user units; the page scales the SVG to its column
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 52, 16, 12, 42
STRIP_HEIGHT = 34  # under the x axis: rows with no FLOPs, whose AI 0 lies at minus infinity
RADIUS = 5.5
NEAR = 6.0  # points closer than this (user units) are listed together in one tooltip
NEAR_NAMES = 8  # the most of them a tooltip names; the rest are counted


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: Any, pattern: str, scale: float = 1.0) -> str:
    return pattern.format(value * scale) if finite(value) else ""


def _joules(value: float) -> str:
    return f"{value:.3g} J/call" if value >= 1 else f"{value * 1e3:.3g} mJ/call"


def _positive(value: Any) -> bool:
    return finite(value) and value > 0


# The script finds a row's twins with a CSS selector built from its data-point, where a quote or a
# backslash from a family's name is a syntax error: each character outside these is written ~hex~.
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.]")


def point_id(section_index: int, family: str, row_index: int) -> str:
    """The data-point of a row: the same in both plots and on the row's table line."""
    safe = _ID_UNSAFE.sub(lambda match: f"~{ord(match.group()):x}~", family)
    return f"g{section_index}-{safe}-{row_index}"


def command(family: str, row: dict[str, Any], verb: str = "bench") -> str:
    """The bench (or profile) command that measures this row again: one variant, one dtype, its exact
    shape, each word quoted for the shell (names come from the results file: `a|b` must paste as one
    word, not a pipe). "" for a model's row: `rooflint bench` has no family "model:<config>"."""
    if family.startswith("model:"):
        return ""
    size = row.get("shape") or row.get("size") or ""
    parts = [family]
    if row.get("variant"):
        parts += ["--variants", row["variant"]]
    if row.get("dtype"):
        parts += ["--dtype", row["dtype"]]
    if size:
        parts += ["--size", size]
    return " ".join(["rooflint", verb, *(shlex.quote(str(part)) for part in parts)])


# --------------------------------------------------------------------------------------- the rows


@dataclass
class Item:
    """One row of the section: where it goes on each plot, and what its tooltip says."""

    point: str  # point_id
    family: str
    row: dict[str, Any]
    colour: str

    @property
    def ok(self) -> bool:
        return self.row["status"] == OK

    @property
    def has_flops(self) -> bool:
        return _positive(self.row["achieved_tflops"]) and _positive(self.row["ai_flop_per_byte"])

    @property
    def no_flops(self) -> bool:
        """Measured, moves bytes, does no arithmetic (a cache copy): judged on bandwidth alone."""
        return self.ok and self.row["achieved_tflops"] == 0 and _positive(self.row["achieved_gbps"])

    @property
    def gflop_per_j(self) -> float:
        value = self.row.get("flop_per_j")
        return value / 1e9 if _positive(value) else math.nan

    @property
    def has_energy(self) -> bool:
        return self.ok and _positive(self.row.get("energy_per_call_j"))

    def attributes(self) -> str:
        row = self.row
        values = {
            "family": self.family,
            "variant": row["variant"],
            "kind": row["kind"],
            "dtype": row["dtype"],
            "point": self.point,
        }
        return " ".join(f'data-{name}="{_esc(value)}"' for name, value in values.items())

    def title(self) -> str:
        kind = f" ({self.row['kind']})" if self.row["kind"] and self.row["kind"] != self.row["variant"] else ""
        # a library row names whose kernel, and which release, it timed
        library = " ".join(filter(None, (text(self.row.get("library")), text(self.row.get("library_version")))))
        return f"{self.family} / {self.row['variant']}{kind}" + (f" [{library}]" if library else "")

    def tooltip(self, reason: str = "") -> str:
        """data-title, data-tip (one line per fact) and data-cmd of this row's point."""
        row = self.row
        preset = f" ({row['size']})" if row.get("size") and row["size"] != "custom" else ""
        lines = [f"{row['dtype']} · {row['shape']}{preset}"]
        if reason:
            lines.append(reason)
        if self.ok:
            spread = ""
            if finite(row["p20_ms"]) and finite(row["p80_ms"]):
                spread = f" (p20 {row['p20_ms']:.4g}, p80 {row['p80_ms']:.4g})"
            lines.append(f"time {row['median_ms']:.4g} ms median{spread}")
            rate = [_num(row["achieved_tflops"], "{:.3g} TFLOP/s"), _num(row["achieved_gbps"], "{:.4g} GB/s")]
            rate.append(_num(row["ai_flop_per_byte"], "AI {:.4g} FLOP/B"))
            lines.append(" · ".join(r for r in rate if r))
            if finite(row["pct_of_roof"]):
                bound = f" ({row['bound']}-bound)" if row["bound"] else ""
                lines.append(f"{row['pct_of_roof']:.1f}% of roof{bound}")
            peers = [
                _num(row.get("speedup_vs_best_compile"), "{:.2f}x vs best compile"),
                _num(row.get("speedup_vs_best_library"), "{:.2f}x vs best library"),
            ]
            if any(peers):
                lines.append(" · ".join(p for p in peers if p))
            if self.has_energy:
                energy = [
                    _joules(row["energy_per_call_j"]),
                    _num(row.get("flop_per_j"), "{:.3g} GFLOP/J", 1e-9) if self.has_flops else "",
                    _num(row.get("bytes_per_j"), "{:.3g} GB/J", 1e-9),
                    _num(row.get("power_median_w"), "{:.0f} W median"),
                ]
                lines.append("energy " + " · ".join(e for e in energy if e))
            if _positive(row.get("measured_dram_bytes")):
                measured = _num(row.get("measured_ai_flop_per_byte"), ", AI {:.4g} FLOP/B")
                lines.append(f"ncu DRAM {row['measured_dram_bytes'] / 1e9:.4g} GB{measured}")
        lint = "; ".join(part.strip() for part in text(row.get("lint")).split(";") if part.strip())
        lines.append(f"lint: {lint or 'no findings'}")
        return (
            f'data-title="{_esc(self.title())}" data-tip="{_esc(chr(10).join(lines))}" '
            f'data-cmd="{_esc(command(self.family, row))}"'
        )


def items_of(section, section_index: int) -> list[Item]:
    families = sorted({f for f, rows in section.families.items() if any(r["status"] == OK for r in rows)})
    colours = family_colours(families)
    out = []
    for family, rows in section.families.items():
        for index, row in enumerate(rows):
            colour = colours.get(family, "#555555")
            out.append(Item(point_id(section_index, family, index), family, row, colour))
    return out


def off_plot_reason(item: Item) -> str:
    """Why a row has no point on the time roofline ("" when it has one)."""
    row = item.row
    if not item.ok:
        first = text(row.get("message")).splitlines()[0][:160] if text(row.get("message")) else ""
        return f"{row['status']}{': ' + first if first else ''}: no trustworthy time, so no point"
    if item.has_flops:
        return ""
    if item.no_flops:
        pct = _num(row["pct_of_roof"], ", {:.1f}% of the bandwidth roof")
        return f"no FLOPs: AI 0 and 0 TFLOP/s lie at minus infinity on log axes; {row['achieved_gbps']:.4g} GB/s{pct}"
    if not _positive(row["ai_flop_per_byte"]):
        return "no arithmetic intensity (the cost model gives no bytes)"
    return "no achieved rate recorded"


# ------------------------------------------------------------------------------------- the geometry


@dataclass
class LogAxes:
    """Log-log mapping from values to SVG user units inside the frame."""

    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float
    left: float = MARGIN_LEFT
    top: float = MARGIN_TOP
    width: float = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    height: float = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM

    def x(self, value: float) -> float:
        span = math.log10(self.x_hi) - math.log10(self.x_lo)
        return self.left + (math.log10(value) - math.log10(self.x_lo)) / span * self.width

    def y(self, value: float) -> float:
        span = math.log10(self.y_hi) - math.log10(self.y_lo)
        return self.top + self.height - (math.log10(value) - math.log10(self.y_lo)) / span * self.height

    @property
    def bottom(self) -> float:
        return self.top + self.height

    @property
    def right(self) -> float:
        return self.left + self.width


def x_range(ais: list[float], ridges: list[float]) -> tuple[float, float]:
    """Whole decades around every point and every ridge point."""
    values = [a for a in ais if _positive(a)] or [1.0]
    low = min(values) / 1.5
    high = max(values + [r * 4 for r in ridges]) * 1.5
    return 10 ** math.floor(math.log10(low)), 10 ** math.ceil(math.log10(high))


def y_range(values: list[float]) -> tuple[float, float]:
    """A whole decade below the lowest value, and twice the highest above it (room for roof labels)."""
    values = [v for v in values if _positive(v)] or [1.0]
    return 10 ** math.floor(math.log10(min(values) / 1.3)), max(values) * 2.5


def _tick(value: float) -> str:
    """Decade labels short enough to sit under a tick: 0.01, 1, 100, 10k, 1M."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:g}{suffix}"
    if value >= 1:
        return f"{value:g}"
    return f"{value:.{max(0, -math.floor(math.log10(value)))}f}"


def _frame(axes: LogAxes, x_label: str, y_label: str) -> list[str]:
    # The value ranges ride on the frame, so a reader (or a test) can map any position back to values.
    parts = [
        f'<rect class="frame" x="{axes.left}" y="{axes.top}" width="{axes.width}" height="{axes.height}" '
        f'data-x-range="{axes.x_lo!r} {axes.x_hi!r}" data-y-range="{axes.y_lo!r} {axes.y_hi!r}"/>'
    ]
    for exponent in range(math.floor(math.log10(axes.x_lo)), math.ceil(math.log10(axes.x_hi)) + 1):
        value = 10.0**exponent
        if axes.x_lo <= value <= axes.x_hi:
            x = axes.x(value)
            parts.append(f'<line class="grid" x1="{x:.1f}" y1="{axes.top}" x2="{x:.1f}" y2="{axes.bottom}"/>')
            parts.append(
                f'<text class="tick" x="{x:.1f}" y="{axes.bottom + 14}" text-anchor="middle">{_tick(value)}</text>'
            )
    for exponent in range(math.floor(math.log10(axes.y_lo)), math.ceil(math.log10(axes.y_hi)) + 1):
        value = 10.0**exponent
        if axes.y_lo <= value <= axes.y_hi:
            y = axes.y(value)
            parts.append(f'<line class="grid" x1="{axes.left}" y1="{y:.1f}" x2="{axes.right}" y2="{y:.1f}"/>')
            parts.append(
                f'<text class="tick" x="{axes.left - 5}" y="{y + 4:.1f}" text-anchor="end">{_tick(value)}</text>'
            )
    middle_x, middle_y = axes.left + axes.width / 2, axes.top + axes.height / 2
    parts.append(f'<text class="axis" x="{middle_x:.1f}" y="{axes.bottom + 32}" text-anchor="middle">{x_label}</text>')
    parts.append(
        f'<text class="axis" x="14" y="{middle_y:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {middle_y:.1f})">{y_label}</text>'
    )
    return parts


def _roofs(
    axes: LogAxes, slope: float, slope_label: str, peaks: list[tuple[str, float]], points: list[tuple[float, float]]
) -> list[str]:
    """Each compute roof min(peak, AI x slope) with its label, and the slope's label along it.
    ``slope`` (bandwidth) and the peaks are in the plot's y unit (per unit of AI); ``points`` (user
    units) are the markers a label should not cover."""
    parts = []
    for label, peak in peaks:
        ridge = peak / slope
        corners = [(axes.x_lo, min(peak, axes.x_lo * slope))]
        if axes.x_lo < ridge < axes.x_hi:
            corners.append((ridge, peak))
        corners.append((axes.x_hi, peak))
        drawn = " ".join(f"{axes.x(x):.1f},{axes.y(max(y, axes.y_lo)):.1f}" for x, y in corners)
        parts.append(f'<polyline class="roof" points="{drawn}"/>')
        # Just right of the ridge, above the flat roof (points under a roof never hide it); below
        # the roof where points above it (the energy plot's low-power rows) would.
        width, y_roof = len(label) * 6.2, axes.y(peak)
        start = axes.x(max(ridge, axes.x_lo)) + 4
        starts = [start, axes.right - 4 - width] if start + width < axes.right else [axes.right - 4 - width]
        places = [(x0, baseline) for baseline in (y_roof - 5, y_roof + 14) for x0 in starts]
        # The first of the least covered places.
        x0, baseline = min(places, key=lambda place: _covered(points, place[0], place[1], width))
        parts.append(f'<text class="roof-label" x="{x0:.1f}" y="{baseline:.1f}">{_esc(label)}</text>')
    # Turned to lie along the slope: one decade of AI is one decade of rate.
    decade_x = axes.width / (math.log10(axes.x_hi) - math.log10(axes.x_lo))
    decade_y = axes.height / (math.log10(axes.y_hi) - math.log10(axes.y_lo))
    angle = math.degrees(math.atan2(decade_y, decade_x))
    at = axes.x_lo * 1.5
    if peaks and at * slope > axes.y_lo * 1.5:
        x, y = axes.x(at), axes.y(at * slope) - 6
        parts.append(
            f'<text class="roof-label" x="{x:.1f}" y="{y:.1f}" transform="rotate({-angle:.1f} {x:.1f} {y:.1f})">'
            f"{_esc(slope_label)}</text>"
        )
    return parts


def _covered(points: list[tuple[float, float]], x0: float, baseline: float, width: float) -> int:
    """How many markers a label of ``width`` at (x0, baseline) would cover."""
    box = (x0 - RADIUS, x0 + width + RADIUS, baseline - 11 - RADIUS, baseline + 2 + RADIUS)
    return sum(box[0] < px < box[1] and box[2] < py < box[3] for px, py in points)


def _marker(kind: str, x: float, y: float, r: float = RADIUS) -> str:
    """SVG path of the variant kind's marker: the shapes matplotlib draws for KIND_MARKERS."""
    shape = KIND_MARKERS.get(kind, "o")
    if shape == "s":
        d = r * 0.85
        return f"M{x - d:.1f},{y - d:.1f}h{2 * d:.1f}v{2 * d:.1f}h{-2 * d:.1f}z"
    if shape == "D":
        return f"M{x:.1f},{y - r * 1.15:.1f}L{x + r:.1f},{y:.1f}L{x:.1f},{y + r * 1.15:.1f}L{x - r:.1f},{y:.1f}z"
    if shape == "^":
        return f"M{x:.1f},{y - r * 1.1:.1f}L{x + r:.1f},{y + r * 0.8:.1f}L{x - r:.1f},{y + r * 0.8:.1f}z"
    if shape == "v":
        return f"M{x:.1f},{y + r * 1.1:.1f}L{x + r:.1f},{y - r * 0.8:.1f}L{x - r:.1f},{y - r * 0.8:.1f}z"
    if shape == "*":  # a five-pointed star: library peers
        radii = [r * 1.3 if i % 2 == 0 else r * 0.55 for i in range(10)]
        corners = [(x + q * math.sin(i * math.pi / 5), y - q * math.cos(i * math.pi / 5)) for i, q in enumerate(radii)]
        return "M" + "L".join(f"{cx:.1f},{cy:.1f}" for cx, cy in corners) + "z"
    return f"M{x - r:.1f},{y:.1f}a{r},{r} 0 1,0 {2 * r},0a{r},{r} 0 1,0 {-2 * r},0z"


def _point(item: Item, x: float, y: float, reason: str = "", classes: str = "point", tooltip: bool = True) -> str:
    """A row's marker; ``tooltip=False`` leaves its tooltip to the time plot's point of the same data-point."""
    tip = f" {item.tooltip(reason)}" if tooltip else ""
    return (
        f'<path class="{classes}" d="{_marker(item.row["kind"], x, y)}" fill="{item.colour}" stroke="{item.colour}" '
        f'{item.attributes()} data-x="{x:.1f}" data-y="{y:.1f}"{tip}/>'
    )


def _twin(item: Item, axes: LogAxes, y_value: float) -> list[str]:
    """The ncu-measured twin of a point: the same FLOPs and time over the DRAM bytes ncu counted,
    hollow, joined to the analytic point by a dotted line."""
    row = item.row
    measured = row.get("measured_ai_flop_per_byte")
    if not _positive(measured) or not _positive(y_value):
        return []
    x0, x1, y = axes.x(row["ai_flop_per_byte"]), axes.x(measured), axes.y(y_value)
    ratio = row["ai_flop_per_byte"] / measured  # measured bytes over modelled bytes
    tip = (
        f"{row['dtype']} · {row['shape']}\n"
        f"AI by ncu's DRAM bytes: {measured:.3g} FLOP/B (the cost model: {row['ai_flop_per_byte']:.3g})\n"
        f"DRAM traffic {row['measured_dram_bytes'] / 1e9:.4g} GB, {ratio:.2f}x the modelled bytes\n"
        "same FLOPs and time as the analytic point"
    )
    profile = command(item.family, row, "profile")
    profile += " --ncu" if profile else ""
    return [
        f'<line class="link" x1="{x0:.1f}" y1="{y:.1f}" x2="{x1:.1f}" y2="{y:.1f}" stroke="{item.colour}" '
        f"{item.attributes()}/>",
        f'<path class="ncu" d="{_marker(row["kind"], x1, y)}" stroke="{item.colour}" {item.attributes()} '
        f'data-x="{x1:.1f}" data-y="{y:.1f}" data-title="{_esc(item.title() + " · ncu-measured bytes")}" '
        f'data-tip="{_esc(tip)}" data-cmd="{_esc(profile)}"/>',
    ]


def _strip(items: list[Item], top: float, note: str) -> tuple[list[str], float]:
    """Rows with no FLOPs, under the x axis at its left end (AI 0 lies beyond it): markers with tooltips.
    Returns the SVG parts and the height used."""
    if not items:
        return [], 0.0
    label = f"← AI 0: {note}"
    start = 8 + len(label) * 5.9
    per_line = max(1, int((WIDTH - start - 8) // 15))
    parts = [f'<text class="strip-label" x="8" y="{top + 14:.1f}">{_esc(label)}</text>']
    for index, item in enumerate(items):
        line, column = divmod(index, per_line)
        x, y = start + 8 + 15 * column, top + 10 + 16 * line
        parts.append(_point(item, x, y, off_plot_reason(item), "point offplot"))
    lines = math.ceil(len(items) / per_line)
    return parts, 12 + 16 * lines


def _svg(plot: str, parts: list[str], height: float, title: str) -> str:
    return (
        f'<svg class="roofline" data-plot="{plot}" viewBox="0 0 {WIDTH} {height:.0f}" role="img" '
        f'aria-label="{_esc(title)}">{"".join(parts)}</svg>'
    )


def time_plot(items: list[Item], spec, x_lo: float, x_hi: float) -> str:
    """TFLOP/s against FLOP/byte under the GPU's roofs; zero-FLOP rows in the strip under the axis."""
    plotted = [i for i in items if i.ok and i.has_flops]
    roofs = ceilings_for(spec, {i.row["dtype"] for i in items} | {"bf16"}) if spec else []
    slope = spec.bandwidth_gbps / 1e3 if spec else 0.0  # TFLOP/s per FLOP/byte
    values = [i.row["achieved_tflops"] for i in plotted] + [peak for _, peak in roofs]
    if slope:
        values.append(x_lo * slope)
    axes = LogAxes(x_lo, x_hi, *y_range(values))
    parts = _frame(axes, "arithmetic intensity (FLOP per byte of DRAM traffic)", "TFLOP/s")
    if spec:
        labels = [(f"{label} {peak:g} TFLOP/s", peak) for label, peak in roofs]
        markers = [(axes.x(i.row["ai_flop_per_byte"]), axes.y(i.row["achieved_tflops"])) for i in plotted]
        parts += _roofs(axes, slope, f"{spec.bandwidth_gbps:g} GB/s", labels, markers)
    for item in plotted:
        parts += _twin(item, axes, item.row["achieved_tflops"])
    for item in plotted:
        parts.append(_point(item, axes.x(item.row["ai_flop_per_byte"]), axes.y(item.row["achieved_tflops"])))
    strip, extra = _strip([i for i in items if i.no_flops], HEIGHT, "no FLOPs, judged on bandwidth alone")
    title = f"time roofline{' on ' + spec.name if spec else ''}"
    return _svg("time", parts + strip, HEIGHT + extra, title)


def median_power(rows: list[dict[str, Any]]) -> float:
    """The median of the rows' NVML median power: the one power the energy roofs are drawn at and
    the HTML and Markdown reports quote. ``rows`` are the rows with an energy reading."""
    powers = [row["power_median_w"] for row in rows if _positive(row.get("power_median_w"))]
    return statistics.median(powers) if powers else math.nan


def energy_plot(items: list[Item], spec, x_lo: float, x_hi: float) -> tuple[str, str]:
    """GFLOP/J against FLOP/byte: the same points, and (with power recorded) the roofs divided by the
    median measured power. Returns the SVG and its caption; ("", why) when no energy was measured."""
    measured = [i for i in items if i.has_energy]
    if not measured:
        return "", (
            "no energy measured (needs NVML): these rows were timed where NVML's energy counter could not "
            "be read (a CPU run, or no nvidia-ml-py), so there is no energy roofline."
        )
    plotted = [i for i in measured if i.has_flops and _positive(i.gflop_per_j)]
    power = median_power([i.row for i in items if i.has_energy])
    roofs = ceilings_for(spec, {i.row["dtype"] for i in items} | {"bf16"}) if spec and finite(power) else []
    slope = spec.bandwidth_gbps / power if roofs else 0.0  # GFLOP/J per FLOP/byte at that power
    peaks = [(f"{label} {peak * 1e3 / power:.4g} GFLOP/J", peak * 1e3 / power) for label, peak in roofs]
    values = [i.gflop_per_j for i in plotted] + [p for _, p in peaks] + ([x_lo * slope] if slope else [])
    axes = LogAxes(x_lo, x_hi, *y_range(values))
    parts = _frame(axes, "arithmetic intensity (FLOP per byte of DRAM traffic)", "GFLOP per joule")
    if roofs:
        markers = [(axes.x(i.row["ai_flop_per_byte"]), axes.y(i.gflop_per_j)) for i in plotted]
        parts += _roofs(axes, slope, f"{spec.bandwidth_gbps:g} GB/s ÷ {power:.0f} W", peaks, markers)
    for item in plotted:
        parts += _twin(item, axes, item.gflop_per_j)
    for item in plotted:  # each is on the time plot too, which carries its tooltip
        parts.append(_point(item, axes.x(item.row["ai_flop_per_byte"]), axes.y(item.gflop_per_j), tooltip=False))
    strip, extra = _strip([i for i in measured if i.no_flops], HEIGHT, "no FLOPs: their GB/J is in the tooltip")
    if roofs:
        caption = (
            f"Energy roofline: the same points in FLOP per joule (NVML's energy counter over the timed calls). "
            f"Roofs at the median measured power, {power:.0f} W: each compute peak and the bandwidth "
            f"({spec.bandwidth_gbps:g} GB/s) divided by it. "
            f"A point above a roof ran at less than {power:.0f} W."
        )
    else:
        caption = "Energy per FLOP as measured; no roof: " + (
            "no ceilings known for this GPU." if not spec else "no power was recorded with the energy."
        )
    missing = sum(1 for i in items if i.ok and not i.has_energy)
    if missing:
        caption += f" {missing} ok rows have no energy reading and are not drawn here."
    return _svg("energy", parts + strip, HEIGHT + extra, "energy roofline"), caption


# ----------------------------------------------------------------------------------- the section


def _key_glyph(kind: str) -> str:
    return f'<svg class="key" viewBox="0 0 14 14"><path d="{_marker(kind, 7, 7, 4.5)}"/></svg>'


def _swatch(colour: str) -> str:
    return f'<svg class="key" viewBox="0 0 14 14"><rect x="2" y="2" width="10" height="10" fill="{colour}"/></svg>'


def _fieldset(name: str, legend: str, values: list[tuple[str, str]]) -> str:
    boxes = "".join(
        f'<label><input type="checkbox" checked data-filter="{name}" value="{_esc(value)}">{key}{_esc(value)}</label>'
        for value, key in values
    )
    buttons = '<button type="button" data-set="all">all</button><button type="button" data-set="none">none</button>'
    return f"<fieldset><legend>{legend} {buttons}</legend>{boxes}</fieldset>"


def render_section(section, section_index: int) -> str:
    """The interactive block of one GPU: filters and legend, the two rooflines, the rows off the plot."""
    items = items_of(section, section_index)
    spec = section.spec
    plotted = [i for i in items if i.ok and i.has_flops]
    ais = [i.row["ai_flop_per_byte"] for i in plotted] + [i.row.get("measured_ai_flop_per_byte") for i in plotted]
    ridges = [peak * 1e3 / spec.bandwidth_gbps for _, peak in ceilings_for(spec)] if spec else []
    x_lo, x_hi = x_range(ais, ridges)
    seen: dict[str, dict[str, str]] = {"family": {}, "kind": {}, "dtype": {}}
    for item in items:
        seen["family"].setdefault(item.family, _swatch(item.colour))
        seen["kind"].setdefault(item.row["kind"], _key_glyph(item.row["kind"]))
        seen["dtype"].setdefault(item.row["dtype"], "")
    drawn = sum(1 for i in items if i.ok and (i.has_flops or i.no_flops))
    filters = (
        _fieldset("family", "family (colour)", list(seen["family"].items()))
        + _fieldset("kind", "variant kind (marker)", list(seen["kind"].items()))
        + _fieldset("dtype", "dtype", list(seen["dtype"].items()))
        + f'<p class="count"><b class="shown">{drawn}</b> of <span class="total">{drawn}</span> rows shown'
        " · hover a point for its numbers, click to pin the tooltip</p>"
    )
    time_caption = (
        f"Time roofline on {spec.name}: {spec.bandwidth_gbps:g} GB/s and the compute peaks "
        f"({section.ceiling_source} ceilings). Markers are the cost model's FLOPs and bytes over the measured time."
        if spec
        else "No ceilings known for this GPU: the points are drawn without roofs."
    )
    if any(_positive(i.row.get("measured_ai_flop_per_byte")) for i in plotted):
        time_caption += " Hollow markers, joined by a line, put the same FLOPs over the DRAM bytes ncu counted."
    energy_svg, energy_caption = energy_plot(items, spec, x_lo, x_hi)
    energy = (
        f'<figure class="plot">{energy_svg}<figcaption>{_esc(energy_caption)}</figcaption></figure>'
        if energy_svg
        else f'<figure class="plot noenergy"><p>{_esc(energy_caption)}</p></figure>'
    )
    # Every row without a marker: a failed or crashed row is listed even where its file holds numbers.
    off = [i for i in items if not (i.ok and (i.has_flops or i.no_flops))]
    listing = "".join(
        f"<li {i.attributes()}><b>{_esc(i.title())}</b> {_esc(i.row['dtype'])} "
        f"<code>{_esc(i.row['shape'])}</code>: {_esc(off_plot_reason(i))}</li>"
        for i in off
    )
    off_list = f'<p>Not on the plot:</p><ul class="offplot-list">{listing}</ul>' if off else ""
    return (
        f'<div class="roofline-section" data-gpu="{_esc(section.gpu)}"><div class="filters">{filters}</div>'
        f'<div class="plots"><figure class="plot">{time_plot(items, spec, x_lo, x_hi)}'
        f"<figcaption>{_esc(time_caption)}</figcaption></figure>{energy}</div>{off_list}</div>"
    )


TOOLTIP = (
    '<div id="rooflint-tip" class="tip" role="tooltip" hidden><div class="tip-title"></div>'
    '<div class="tip-body"></div><code class="tip-cmd"></code><div class="tip-near"></div></div>'
)

STYLE = """
.roofline-section{margin:.5em 0 1.5em}
.filters{display:flex;flex-wrap:wrap;gap:.3em 1em;align-items:flex-start;font-size:13px}
.filters fieldset{border:1px solid #ddd;padding:.2em .6em;margin:0}
.filters legend{font-weight:600}
.filters label{display:inline-flex;align-items:center;gap:3px;margin-right:.8em;white-space:nowrap}
.filters button{font-size:11px;padding:0 4px;margin-left:3px}
.count{flex-basis:100%;margin:.2em 0}
svg.key{width:14px;height:14px;fill:#666}
.plots{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}
figure.plot{margin:0;flex:1 1 560px;max-width:860px}
figure.plot figcaption{font-size:12px;color:#555}
figure.plot.noenergy{flex:0 1 280px;border:1px dashed #bbb;display:flex;align-items:center;min-height:160px}
figure.noenergy p{color:#666;padding:1em;max-width:30em}
svg.roofline{width:100%;height:auto;font-family:system-ui,sans-serif;background:#fff}
svg.roofline .frame{fill:none;stroke:#999}
svg.roofline .grid{stroke:#eee}
svg.roofline .tick{font-size:11px;fill:#555}
svg.roofline .axis{font-size:12px;fill:#333}
svg.roofline .roof{fill:none;stroke:#333;stroke-width:1.5}
svg.roofline .roof-label{font-size:11px;fill:#444;paint-order:stroke;stroke:#fff;stroke-width:3px}
svg.roofline .strip-label{font-size:11px;fill:#555}
svg.roofline .point{fill-opacity:.85;stroke-width:1;cursor:pointer}
svg.roofline .ncu{fill:#fff;fill-opacity:.6;stroke-width:1.6;cursor:pointer}
svg.roofline .link{stroke-dasharray:2 2;stroke-width:1.2}
svg.roofline .hl{stroke:#000;stroke-width:2.5}
.hidden{display:none}
tr.hl td{background:#fff3c4}
.offplot-list{font-size:13px}
.tip{position:fixed;z-index:10;max-width:34em;background:#fffffb;border:1px solid #888;border-radius:4px;
 padding:6px 8px;font-size:12px;box-shadow:0 2px 8px rgba(0,0,0,.25);pointer-events:none}
.tip.pinned{pointer-events:auto;border-color:#333}
.tip-title{font-weight:700}
.tip-body{white-space:pre-line;overflow-wrap:anywhere}
.tip-cmd{display:block;margin-top:4px;background:#f3f3f3;padding:2px 4px;user-select:all;overflow-wrap:anywhere}
.tip-cmd span{white-space:nowrap}
.tip-cmd:empty{display:none}
.tip-near{color:#555;margin-top:3px}
"""

# Tooltips (hover; click pins one so its command can be copied; Esc closes), highlighting a row's
# twins in both plots and its table line, and the filters with their count of shown rows. A tooltip
# names NEAR_NAMES of the other points under the mouse and counts the rest: in a crowd (thousands of
# rows) the whole list outgrew the window and hid the row's own numbers.
SCRIPT = """
(function () {
  var tip = document.getElementById("rooflint-tip"), pinned = null, NEAR = NEAR_UNITS;
  if (!tip) return;
  function source(el) {  // energy points: the tip is on the time twin
    return el.dataset.tip !== undefined ? el :
      document.querySelector('svg[data-plot="time"] [data-tip][data-point="' + el.dataset.point + '"]') || el;
  }
  function fill(el) {
    var src = source(el);
    tip.querySelector(".tip-title").textContent = src.dataset.title || "";
    tip.querySelector(".tip-body").textContent = src.dataset.tip || "";
    var cmd = tip.querySelector(".tip-cmd");  // short words kept whole: no line breaks inside "--dtype"
    cmd.textContent = "";
    (src.dataset.cmd ? src.dataset.cmd.split(" ") : []).forEach(function (word, i) {
      if (i) cmd.appendChild(document.createTextNode(" "));
      if (word.length > 24) cmd.appendChild(document.createTextNode(word));
      else cmd.appendChild(document.createElement("span")).textContent = word;
    });
    var x = +el.dataset.x, y = +el.dataset.y, near = [];
    el.ownerSVGElement.querySelectorAll(".point, .ncu").forEach(function (o) {
      if (o !== el && !o.classList.contains("hidden") &&
          Math.abs(o.dataset.x - x) < NEAR && Math.abs(o.dataset.y - y) < NEAR) near.push(source(o).dataset.title);
    });
    var n = near.length;
    if (n > NEAR_NAMES) near.splice(NEAR_NAMES, n, "and " + (n - NEAR_NAMES) + " more");
    tip.querySelector(".tip-near").textContent = n ? "also here: " + near.join("; ") : "";
  }
  function place(ev) {
    var w = tip.offsetWidth, h = tip.offsetHeight, x = ev.clientX + 14, y = ev.clientY + 14;
    if (x + w > innerWidth - 4) x = Math.max(4, ev.clientX - w - 14);
    if (y + h > innerHeight - 4) y = Math.max(4, ev.clientY - h - 14);
    tip.style.left = x + "px"; tip.style.top = y + "px";
  }
  function highlight(el, on) {
    document.querySelectorAll('[data-point="' + el.dataset.point + '"]').forEach(function (o) {
      o.classList.toggle("hl", on);
    });
  }
  function close() { pinned = null; tip.hidden = true; tip.classList.remove("pinned"); }
  document.querySelectorAll("svg.roofline [data-tip], svg.roofline .point[data-point]").forEach(function (el) {
    el.addEventListener("mouseenter", function (ev) {
      highlight(el, true);
      if (pinned) return;
      fill(el); tip.hidden = false; place(ev);
    });
    el.addEventListener("mousemove", function (ev) { if (!pinned) place(ev); });
    el.addEventListener("mouseleave", function () { highlight(el, false); if (!pinned) tip.hidden = true; });
    el.addEventListener("click", function (ev) {
      ev.stopPropagation();
      if (pinned === el) { close(); return; }
      pinned = el; fill(el); tip.hidden = false; tip.classList.add("pinned"); place(ev);
    });
  });
  document.addEventListener("click", function (ev) { if (pinned && !tip.contains(ev.target)) close(); });
  document.addEventListener("keydown", function (ev) { if (ev.key === "Escape") close(); });
  document.querySelectorAll("tr[data-point]").forEach(function (tr) {
    tr.addEventListener("mouseenter", function () { highlight(tr, true); });
    tr.addEventListener("mouseleave", function () { highlight(tr, false); });
  });
  document.querySelectorAll(".roofline-section").forEach(function (section) {
    var boxes = section.querySelectorAll("input[data-filter]");
    function apply() {
      var off = {};
      boxes.forEach(function (b) { if (!b.checked) off[b.dataset.filter + "=" + b.value] = true; });
      section.querySelectorAll(".plots [data-family], .offplot-list [data-family]").forEach(function (el) {
        var d = el.dataset, hide = off["family=" + d.family] || off["kind=" + d.kind] || off["dtype=" + d.dtype];
        el.classList.toggle("hidden", !!hide);
      });
      section.querySelector(".shown").textContent =
        section.querySelectorAll('svg[data-plot="time"] .point:not(.hidden)').length;
    }
    boxes.forEach(function (b) { b.addEventListener("change", apply); });
    section.querySelectorAll("button[data-set]").forEach(function (button) {
      button.addEventListener("click", function () {
        button.closest("fieldset").querySelectorAll("input").forEach(function (b) {
          b.checked = button.dataset.set === "all";
        });
        apply();
      });
    });
    apply();
  });
})();
""".replace("NEAR_UNITS", str(NEAR)).replace("NEAR_NAMES", str(NEAR_NAMES))
