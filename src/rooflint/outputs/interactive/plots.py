"""The two rooflines of a GPU: time (TFLOP/s) and energy (GFLOP/J), both against arithmetic intensity
on the same x range, each with its roofs, its points and the strip of rows with no FLOPs. Each
returns a whole <svg>; the energy roofs sit at the rows' median measured power."""

from __future__ import annotations

import math
import statistics
from typing import Any

from rooflint.core.fmt import finite
from rooflint.outputs.interactive.geometry import HEIGHT, WIDTH, LogAxes, draw_frame, draw_roofs, y_range
from rooflint.outputs.interactive.items import Item
from rooflint.outputs.interactive.marks import ncu_twin, no_flops_strip, point_mark
from rooflint.outputs.interactive.values import esc, positive
from rooflint.outputs.points import ceilings_for


def _svg(plot: str, parts: list[str], height: float, title: str) -> str:
    return (
        f'<svg class="roofline" data-plot="{plot}" viewBox="0 0 {WIDTH} {height:.0f}" role="img" '
        f'aria-label="{esc(title)}">{"".join(parts)}</svg>'
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
    parts = draw_frame(axes, "arithmetic intensity (FLOP per byte of DRAM traffic)", "TFLOP/s")
    if spec:
        labels = [(f"{label} {peak:g} TFLOP/s", peak) for label, peak in roofs]
        markers = [(axes.x(i.row["ai_flop_per_byte"]), axes.y(i.row["achieved_tflops"])) for i in plotted]
        parts += draw_roofs(axes, slope, f"{spec.bandwidth_gbps:g} GB/s", labels, markers)
    for item in plotted:
        parts += ncu_twin(item, axes, item.row["achieved_tflops"])
    for item in plotted:
        parts.append(point_mark(item, axes.x(item.row["ai_flop_per_byte"]), axes.y(item.row["achieved_tflops"])))
    strip, extra = no_flops_strip([i for i in items if i.no_flops], HEIGHT, "no FLOPs, judged on bandwidth alone")
    title = f"time roofline{' on ' + spec.name if spec else ''}"
    return _svg("time", parts + strip, HEIGHT + extra, title)


def median_power(rows: list[dict[str, Any]]) -> float:
    """The median of the rows' NVML median power: the one power the energy roofs are drawn at and
    the HTML and Markdown reports quote. ``rows`` are the rows with an energy reading."""
    powers = [row["power_median_w"] for row in rows if positive(row.get("power_median_w"))]
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
    plotted = [i for i in measured if i.has_flops and positive(i.gflop_per_j)]
    power = median_power([i.row for i in items if i.has_energy])
    roofs = ceilings_for(spec, {i.row["dtype"] for i in items} | {"bf16"}) if spec and finite(power) else []
    slope = spec.bandwidth_gbps / power if roofs else 0.0  # GFLOP/J per FLOP/byte at that power
    peaks = [(f"{label} {peak * 1e3 / power:.4g} GFLOP/J", peak * 1e3 / power) for label, peak in roofs]
    values = [i.gflop_per_j for i in plotted] + [p for _, p in peaks] + ([x_lo * slope] if slope else [])
    axes = LogAxes(x_lo, x_hi, *y_range(values))
    parts = draw_frame(axes, "arithmetic intensity (FLOP per byte of DRAM traffic)", "GFLOP per joule")
    if roofs:
        markers = [(axes.x(i.row["ai_flop_per_byte"]), axes.y(i.gflop_per_j)) for i in plotted]
        parts += draw_roofs(axes, slope, f"{spec.bandwidth_gbps:g} GB/s ÷ {power:.0f} W", peaks, markers)
    for item in plotted:
        parts += ncu_twin(item, axes, item.gflop_per_j)
    for item in plotted:  # each is on the time plot too, which carries its tooltip
        parts.append(point_mark(item, axes.x(item.row["ai_flop_per_byte"]), axes.y(item.gflop_per_j), tooltip=False))
    strip, extra = no_flops_strip([i for i in measured if i.no_flops], HEIGHT, "no FLOPs: their GB/J is in the tooltip")
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
