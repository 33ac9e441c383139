"""How one row is drawn: its variant kind's marker shape, the point that carries its data-* attributes
and tooltip, the hollow twin ncu's measured bytes put beside it, and the strip under the x axis for
rows with no FLOPs (their AI 0 lies beyond the axis's left end)."""

from __future__ import annotations

import math

from rooflint.outputs.interactive.geometry import RADIUS, WIDTH, LogAxes
from rooflint.outputs.interactive.items import Item, command, off_plot_reason
from rooflint.outputs.interactive.values import esc, positive
from rooflint.outputs.points import KIND_MARKERS


def marker_path(kind: str, x: float, y: float, r: float = RADIUS) -> str:
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


def point_mark(item: Item, x: float, y: float, reason: str = "", classes: str = "point", tooltip: bool = True) -> str:
    """A row's marker; ``tooltip=False`` leaves its tooltip to the time plot's point of the same data-point."""
    tip = f" {item.tooltip(reason)}" if tooltip else ""
    return (
        f'<path class="{classes}" d="{marker_path(item.row["kind"], x, y)}" fill="{item.colour}" '
        f'stroke="{item.colour}" {item.attributes()} data-x="{x:.1f}" data-y="{y:.1f}"{tip}/>'
    )


def ncu_twin(item: Item, axes: LogAxes, y_value: float) -> list[str]:
    """The ncu-measured twin of a point: the same FLOPs and time over the DRAM bytes ncu counted,
    hollow, joined to the analytic point by a dotted line."""
    row = item.row
    measured = row.get("measured_ai_flop_per_byte")
    if not positive(measured) or not positive(y_value):
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
        f'<path class="ncu" d="{marker_path(row["kind"], x1, y)}" stroke="{item.colour}" {item.attributes()} '
        f'data-x="{x1:.1f}" data-y="{y:.1f}" data-title="{esc(item.title() + " · ncu-measured bytes")}" '
        f'data-tip="{esc(tip)}" data-cmd="{esc(profile)}"/>',
    ]


def no_flops_strip(items: list[Item], top: float, note: str) -> tuple[list[str], float]:
    """Rows with no FLOPs, under the x axis at its left end (AI 0 lies beyond it): markers with tooltips.
    Returns the SVG parts and the height used."""
    if not items:
        return [], 0.0
    label = f"← AI 0: {note}"
    start = 8 + len(label) * 5.9
    per_line = max(1, int((WIDTH - start - 8) // 15))
    parts = [f'<text class="strip-label" x="8" y="{top + 14:.1f}">{esc(label)}</text>']
    for index, item in enumerate(items):
        line, column = divmod(index, per_line)
        x, y = start + 8 + 15 * column, top + 10 + 16 * line
        parts.append(point_mark(item, x, y, off_plot_reason(item), "point offplot"))
    lines = math.ceil(len(items) / per_line)
    return parts, 12 + 16 * lines
