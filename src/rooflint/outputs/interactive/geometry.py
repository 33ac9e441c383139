"""Where things go on a plot: the SVG's size and margins, the log-log axes that turn values into user
units, the whole-decade ranges around the points and ridges, the frame with its ticks and labels, and
the roofs with labels placed where they cover the fewest markers. Nothing here knows about rows."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rooflint.outputs.interactive.values import esc, positive

WIDTH, HEIGHT = 620, 430  # SVG user units; the page scales the SVG to its column
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 52, 16, 12, 42
RADIUS = 5.5  # a marker's radius: roof labels are placed clear of it


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
    values = [a for a in ais if positive(a)] or [1.0]
    low = min(values) / 1.5
    high = max(values + [r * 4 for r in ridges]) * 1.5
    return 10 ** math.floor(math.log10(low)), 10 ** math.ceil(math.log10(high))


def y_range(values: list[float]) -> tuple[float, float]:
    """A whole decade below the lowest value, and twice the highest above it (room for roof labels)."""
    values = [v for v in values if positive(v)] or [1.0]
    return 10 ** math.floor(math.log10(min(values) / 1.3)), max(values) * 2.5


def _tick(value: float) -> str:
    """Decade labels short enough to sit under a tick: 0.01, 1, 100, 10k, 1M."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:g}{suffix}"
    if value >= 1:
        return f"{value:g}"
    return f"{value:.{max(0, -math.floor(math.log10(value)))}f}"


def draw_frame(axes: LogAxes, x_label: str, y_label: str) -> list[str]:
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


def draw_roofs(
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
        parts.append(f'<text class="roof-label" x="{x0:.1f}" y="{baseline:.1f}">{esc(label)}</text>')
    # Turned to lie along the slope: one decade of AI is one decade of rate.
    decade_x = axes.width / (math.log10(axes.x_hi) - math.log10(axes.x_lo))
    decade_y = axes.height / (math.log10(axes.y_hi) - math.log10(axes.y_lo))
    angle = math.degrees(math.atan2(decade_y, decade_x))
    at = axes.x_lo * 1.5
    if peaks and at * slope > axes.y_lo * 1.5:
        x, y = axes.x(at), axes.y(at * slope) - 6
        parts.append(
            f'<text class="roof-label" x="{x:.1f}" y="{y:.1f}" transform="rotate({-angle:.1f} {x:.1f} {y:.1f})">'
            f"{esc(slope_label)}</text>"
        )
    return parts


def _covered(points: list[tuple[float, float]], x0: float, baseline: float, width: float) -> int:
    """How many markers a label of ``width`` at (x0, baseline) would cover."""
    box = (x0 - RADIUS, x0 + width + RADIUS, baseline - 11 - RADIUS, baseline + 2 + RADIUS)
    return sum(box[0] < px < box[1] and box[2] < py < box[3] for px, py in points)
