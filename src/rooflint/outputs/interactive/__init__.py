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

The modules, from the bottom up: values (escaping and formatting), items (a row's
point, tooltip and command), geometry (log axes, frame, roofs), marks (how one row is drawn), plots
(the time and energy rooflines), section (one GPU's block); page_assets holds the page's one
stylesheet, script and tooltip element.
"""

from __future__ import annotations

from rooflint.outputs.interactive.items import point_id
from rooflint.outputs.interactive.page_assets import NEAR_NAMES, SCRIPT, STYLE, TOOLTIP
from rooflint.outputs.interactive.plots import median_power
from rooflint.outputs.interactive.section import render_section

__all__ = ["NEAR_NAMES", "SCRIPT", "STYLE", "TOOLTIP", "median_power", "point_id", "render_section"]
