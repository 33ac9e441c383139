"""One GPU's interactive block: the filters that are also the legend (families by colour, variant
kinds by marker, dtypes), the time and energy rooflines side by side on one x range with their
captions, and the list of rows that have no point, each with the reason."""

from __future__ import annotations

from rooflint.outputs.interactive.geometry import x_range
from rooflint.outputs.interactive.items import items_of, off_plot_reason
from rooflint.outputs.interactive.marks import marker_path
from rooflint.outputs.interactive.plots import energy_plot, time_plot
from rooflint.outputs.interactive.values import esc, positive
from rooflint.outputs.points import ceilings_for


def _key_glyph(kind: str) -> str:
    return f'<svg class="key" viewBox="0 0 14 14"><path d="{marker_path(kind, 7, 7, 4.5)}"/></svg>'


def _swatch(colour: str) -> str:
    return f'<svg class="key" viewBox="0 0 14 14"><rect x="2" y="2" width="10" height="10" fill="{colour}"/></svg>'


def _fieldset(name: str, legend: str, values: list[tuple[str, str]]) -> str:
    boxes = "".join(
        f'<label><input type="checkbox" checked data-filter="{name}" value="{esc(value)}">{key}{esc(value)}</label>'
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
    if any(positive(i.row.get("measured_ai_flop_per_byte")) for i in plotted):
        time_caption += " Hollow markers, joined by a line, put the same FLOPs over the DRAM bytes ncu counted."
    energy_svg, energy_caption = energy_plot(items, spec, x_lo, x_hi)
    energy = (
        f'<figure class="plot">{energy_svg}<figcaption>{esc(energy_caption)}</figcaption></figure>'
        if energy_svg
        else f'<figure class="plot noenergy"><p>{esc(energy_caption)}</p></figure>'
    )
    # Every row without a marker: a failed or crashed row is listed even where its file holds numbers.
    off = [i for i in items if not (i.ok and (i.has_flops or i.no_flops))]
    listing = "".join(
        f"<li {i.attributes()}><b>{esc(i.title())}</b> {esc(i.row['dtype'])} "
        f"<code>{esc(i.row['shape'])}</code>: {esc(off_plot_reason(i))}</li>"
        for i in off
    )
    off_list = f'<p>Not on the plot:</p><ul class="offplot-list">{listing}</ul>' if off else ""
    return (
        f'<div class="roofline-section" data-gpu="{esc(section.gpu)}"><div class="filters">{filters}</div>'
        f'<div class="plots"><figure class="plot">{time_plot(items, spec, x_lo, x_hi)}'
        f"<figcaption>{esc(time_caption)}</figcaption></figure>{energy}</div>{off_list}</div>"
    )
