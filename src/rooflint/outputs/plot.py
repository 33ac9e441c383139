"""Roofline plots: log-log FLOP/s against arithmetic intensity, for papers and CI summaries.

Families are told apart by colour and variant kinds by marker, so the legend stays short at any
number of points. Each family's column of points (one shape: one arithmetic intensity) carries the
family's name; a point whose kind does not name it (attention's sdpa_flash is an eager kind) also
carries its variant's name. Labels are placed where they hide no point and no other label.
Rows with no FLOPs (a cache copy) cannot sit on log axes; they are listed under the x axis, at
the side where AI 0 would be, with their bandwidth.

Every image is written with its data beside it (<name>.csv holds the points and the ceilings),
so a number read off a plot can always be traced back to a row.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: CI and GPU boxes have no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from rooflint.core.errors import UserError  # noqa: E402
from rooflint.core.paths import replacing, why_not  # noqa: E402
from rooflint.core.specs import GpuSpec  # noqa: E402
from rooflint.outputs.points import (  # noqa: E402
    KIND_MARKERS,
    POINT_COLUMNS,
    ceilings_for,
    family_colours,
    shape_tag,
)

LABEL_POINTS = 7.5  # font size of point labels: readable in a PNG shown at page width
HOLLOW = ("predicted", "ncu")  # point kinds drawn as outlines


# A GPU's name comes from a results file's gpu column (or a --spec-file key): a path separator in it
# wrote the images into a subfolder, and "../" out of the folder the caller named. Each such
# character is written ~hex~, as the HTML report writes its point ids, so two names stay two files.
_FILE_UNSAFE = re.compile(r"[/\\\x00-\x1f\x7f]")


def roofline_base(directory: Path, gpu: str, several: bool) -> Path:
    """The one name rooflint gives roofline files (bench, roofline and report alike): roofline.png,
    .svg and .csv where a folder holds one GPU's roofline, roofline-<gpu>.* for each of several."""
    safe = _FILE_UNSAFE.sub(lambda match: f"~{ord(match.group()):x}~", str(gpu))
    return Path(directory) / (f"roofline-{safe}" if several else "roofline")


def beside(base: Path, suffix: str) -> Path:
    """``base`` with ``suffix`` appended: a base name holds dots of its own (llama-3.2-1b, a GPU
    called a100.80g), which ``with_suffix`` would take for a suffix and cut, so every set and phase
    of a model would write one file."""
    return base.parent / f"{base.name}{suffix}"


def plot_roofline(
    points: pd.DataFrame,
    spec: GpuSpec,
    out_base: Path,
    title: str,
    extra_ceilings: list[tuple[str, GpuSpec]] | None = None,
) -> list[Path]:
    """Draw ``points`` (columns POINT_COLUMNS; point_kind measured|predicted|ncu) under ``spec``'s roofs.

    ``extra_ceilings`` adds other ceiling sets (e.g. measured ones) drawn dashed and labelled.
    Returns the files written: .png, .svg and .csv.
    """
    # Extra columns (a projection's predicted_ms and model, say) travel into the CSV untouched.
    points = points.reindex(columns=POINT_COLUMNS + [c for c in points.columns if c not in POINT_COLUMNS])
    out_base = Path(out_base)
    written = [beside(out_base, ".png"), beside(out_base, ".svg"), beside(out_base, ".csv")]
    for path in written:
        # Checked before drawing: a folder of that name was found only when its file was written,
        # as an IsADirectoryError (exit 1) after the files before it had been replaced.
        if path.is_dir():
            raise UserError(f"cannot write roofline {path}: it is a directory; move it away or give another --out")
    with _writing(out_base.parent):
        out_base.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # A family or variant named in a script the font lacks (CJK, emoji) draws as boxes; matplotlib's
        # two-line warning per glyph, with its source line, would read like a crash on the console.
        warnings.filterwarnings("ignore", message="Glyph .* missing from font", category=UserWarning)
        fig, ceiling_rows = draw_roofline(points, spec, title, extra_ceilings)
        try:
            with _writing(written[0]):
                save_palette_png(fig, written[0])
            with _writing(written[1]), replacing(written[1], binary=True) as handle:
                fig.savefig(handle, format="svg")
        finally:
            plt.close(fig)
    data = pd.concat([points, pd.DataFrame(ceiling_rows)], ignore_index=True)
    with _writing(written[2]), replacing(written[2], newline="") as handle:
        data.to_csv(handle, index=False)
    return written


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """An output written (each through a private name, renamed into place once whole, so a run
    stopped midway keeps the last roofline, not a cut one), or one line naming it where it cannot be."""
    try:
        yield
    except OSError as error:
        raise UserError(f"cannot write roofline {path}: {why_not(path, error)}") from None


def save_palette_png(fig, path: Path) -> None:
    """``fig`` as a 256-colour palette PNG. A roofline's flat fills, lines, markers and anti-aliased
    text need no more colours, and the file, which every HTML report embeds as base64, is a quarter
    to a fifth of the RGBA one (matplotlib's default)."""
    from PIL import Image  # matplotlib's own image dependency

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    buffer.seek(0)
    with Image.open(buffer) as image:
        palette = image.convert("RGB").quantize(colors=256)
    # Whole or not at all: a report embeds the PNG, and a cut-short one reads as a broken image.
    with replacing(path, binary=True) as handle:
        palette.save(handle, format="PNG", optimize=True)


def draw_roofline(points: pd.DataFrame, spec: GpuSpec, title: str, extra_ceilings=None) -> tuple[Any, list[dict]]:
    """The figure of plot_roofline (the caller saves and closes it) and its ceilings as CSV rows."""
    points = points.reindex(columns=POINT_COLUMNS + [c for c in points.columns if c not in POINT_COLUMNS])
    ai = pd.to_numeric(points["ai_flop_per_byte"], errors="coerce")
    rate = pd.to_numeric(points["achieved_tflops"], errors="coerce")
    flops_points = points[(rate > 0) & (ai > 0)]
    byte_only = points[~points.index.isin(flops_points.index)]
    precisions = set(points["dtype"].dropna().astype(str)) | {"bf16"}
    ais = flops_points["ai_flop_per_byte"].astype(float)
    x_low = min([0.05, *(ais / 4)]) if len(ais) else 0.05
    x_high = max([4096.0, *(ais * 4)]) if len(ais) else 4096.0

    off_lines = _off_plot_lines(byte_only)
    fig = plt.figure(figsize=(13, 8.2), dpi=110)
    bottom = 0.08 + 0.024 * (len(off_lines) + 1 if off_lines else 0)
    ax = fig.add_axes((0.065, bottom, 0.70, 0.93 - bottom))
    ceiling_rows = []
    roof_texts = []  # labels of the roofs: point labels must not cover them
    sets = [(spec.name if spec.origin in spec.name else f"{spec.name} ({spec.origin})", spec, "-")] + [
        (label, other, "--") for label, other in (extra_ceilings or [])
    ]
    for index, (set_label, ceiling_spec, style) in enumerate(sets):
        bandwidth_tbps = ceiling_spec.bandwidth_gbps / 1e3
        for roof_label, peak in ceilings_for(ceiling_spec, precisions):
            ridge = peak / bandwidth_tbps
            ax.plot([x_low, ridge, x_high], [x_low * bandwidth_tbps, peak, peak], style, color="#333", lw=1.3)
            # Solid roofs are labelled above their flat part, dashed ones below: close ceilings stay apart.
            roof_texts.append(
                ax.annotate(
                    f"{roof_label} {peak:g} TFLOP/s" + (f" ({ceiling_spec.origin})" if index else ""),
                    (ridge * 1.15, peak),
                    xytext=(0, 4 if index == 0 else -4),
                    textcoords="offset points",
                    va="bottom" if index == 0 else "top",
                    fontsize=8,
                    color="#333",
                )
            )
            ceiling_rows.append(
                {
                    "label": f"{set_label}: {roof_label}",
                    "point_kind": "ceiling",
                    "achieved_tflops": peak,
                    "achieved_gbps": ceiling_spec.bandwidth_gbps,
                    "ai_flop_per_byte": ridge,
                }
            )
        roof_texts.append(
            ax.annotate(
                f"{ceiling_spec.bandwidth_gbps:g} GB/s ({ceiling_spec.origin})",
                (x_low * 1.3, x_low * 1.3 * bandwidth_tbps),
                xytext=(4, 6 if index == 0 else -12),
                textcoords="offset points",
                fontsize=8,
                color="#333",
            )
        )

    colours = family_colours(points["family"].dropna())
    # One scatter per family, kind and point kind: a few dozen artists, not one per row.
    keys = [flops_points["family"], flops_points["kind"].fillna(""), "point_kind"]
    groups = flops_points.groupby(keys, sort=False, dropna=False)
    for (family, kind, point_kind), group in groups:
        hollow = point_kind in HOLLOW
        colour = colours.get(family, "black")
        ax.scatter(
            group["ai_flop_per_byte"].astype(float),
            group["achieved_tflops"].astype(float),
            s=42,
            marker=_marker(kind),
            facecolors="white" if hollow else colour,
            edgecolors=colour,
            linewidths=1.4 if hollow else 0.6,
            linestyle="--" if point_kind == "predicted" else "-",
            alpha=0.9,
            zorder=3,
        )
    # Analytic and counter-measured points of one kernel share a link id: join them.
    linked = flops_points.dropna(subset=["link"])
    for _, group in linked.groupby("link"):
        if len(group) > 1:
            ax.plot(group["ai_flop_per_byte"], group["achieved_tflops"], ":", color="grey", linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_low, x_high)
    top = max([c["achieved_tflops"] for c in ceiling_rows] + [1.0])
    lowest = list(flops_points["achieved_tflops"].astype(float) / 2)
    ax.set_ylim(max(min([x_low * spec.bandwidth_gbps / 1e3 / 2] + lowest), 1e-4), top * 2.5)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of DRAM traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.08)
    _label_points(fig, ax, flops_points, colours, roof_texts)
    _legends(fig, ax, flops_points, colours, len(sets) > 1)
    if off_lines:
        fig.text(0.01, bottom - 0.075, "\n".join(off_lines), fontsize=8, va="top", family="monospace", gid="off-plot")
    return fig, ceiling_rows


def _marker(kind) -> str:
    return KIND_MARKERS.get(kind, "o") if isinstance(kind, str) else "o"


def _off_plot_lines(byte_only: pd.DataFrame) -> list[str]:
    """Rows with no FLOPs, one line per family and shape: AI 0 lies at minus infinity on a log axis."""
    rows = byte_only[pd.to_numeric(byte_only["achieved_gbps"], errors="coerce") > 0]
    if rows.empty:
        return []
    lines = ["← not on the plot: no FLOPs (AI 0 lies left of the axis, at minus infinity); judged on bandwidth:"]
    groups = rows.assign(tag=[shape_tag(label) for label in rows["label"]]).groupby(["family", "tag"], sort=False)
    for (family, tag), group in groups:
        rates = ", ".join(f"{v} {gbps:.0f}" for v, gbps in zip(group["variant"], group["achieved_gbps"]))
        lines.append(f"   {family}{' ' + tag if tag else ''}: {rates} GB/s")
    return lines


def _legends(fig, ax, points: pd.DataFrame, colours: dict[str, str], dashed: bool) -> None:
    """Families by colour, kinds by marker, and the point and ceiling styles: a few entries, never one per row."""
    families = [Patch(color=colours[f], label=f) for f in sorted(set(points["family"].dropna()))]
    kinds = [k for k in KIND_MARKERS if k in set(points["kind"].dropna())]
    markers = [Line2D([], [], ls="", marker=KIND_MARKERS[k], color="#555", label=k) for k in kinds]
    styles = []
    for point_kind, text in (("ncu", "ncu-measured bytes"), ("predicted", "predicted")):
        if (points["point_kind"] == point_kind).any():
            styles.append(Line2D([], [], ls="", marker="o", mfc="white", mec="#555", label=f"hollow: {text}"))
    if dashed:
        styles.append(Line2D([], [], ls="-", color="#333", label="datasheet ceilings"))
        styles.append(Line2D([], [], ls="--", color="#333", label="measured ceilings"))
    first = fig.legend(handles=families, title="family (colour)", loc="upper left", bbox_to_anchor=(0.775, 0.93))
    first.get_title().set_fontweight("bold")
    box = first.get_window_extent(fig.canvas.get_renderer()).transformed(fig.transFigure.inverted())
    second = fig.legend(
        handles=markers + styles, title="variant kind (marker)", loc="upper left", bbox_to_anchor=(0.775, box.y0 - 0.01)
    )
    second.get_title().set_fontweight("bold")


def _label_points(fig, ax, points: pd.DataFrame, colours: dict[str, str], fixed=()) -> None:
    """One label per family column (its name), plus the variant name of points whose kind does not
    identify them within the column; each placed in the first free spot around its point."""
    if points.empty:
        return
    # The axes sit at a fixed place (add_axes) with fixed limits, so data maps to pixels without a draw.
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    xy = ax.transData.transform(points[["ai_flop_per_byte", "achieved_tflops"]].astype(float).to_numpy())
    taken = _Taken([Bbox.from_extents(x - 6, y - 6, x + 6, y + 6) for x, y in xy])
    for text in fixed:
        taken.add(text.get_window_extent(renderer))
    position = dict(zip(points.index, map(tuple, xy)))
    dtypes = set(points["dtype"].dropna())
    labels = []  # (text, colour, anchors in order of preference)
    key = points["ai_flop_per_byte"].astype(float).apply(lambda v: round(math.log10(v) * 40))
    for (family, _, point_kind), column in points.groupby(["family", key, "point_kind"], sort=False):
        tags = {shape_tag(label) for label in column["label"]}
        name = family + (" " + tags.pop() if len(tags) == 1 and "" not in tags else "")
        name += f" {column['dtype'].iloc[0]}" if len(dtypes) > 1 else ""
        name += f" ({point_kind})" if point_kind in HOLLOW else ""
        by_height = column.sort_values("achieved_tflops", ascending=False).index
        labels.append((name, colours.get(family, "black"), [position[i] for i in by_height], True))
        # A variant's name where its marker does not tell it apart: several points of one kind in
        # one shape (attention's sdpa_* are eager), or a name that is not its kind (rope's triton_table).
        shape_tags = column["label"].map(shape_tag)
        for _, same_kind in column.groupby([column["kind"], shape_tags]):
            if len(same_kind) > 1 or (same_kind["variant"] != same_kind["kind"]).any():
                for index, point in same_kind.iterrows():
                    labels.append((point["variant"], colours.get(family, "black"), [position[index]], False))
    # Family names first: on a crowded plot a variant's name may find no free spot, a column's name must.
    for text, colour, anchors, bold in sorted(labels, key=lambda label: not label[3]):
        _place(ax, renderer, frame, taken, text, colour, anchors, bold)


class _Taken:
    """The boxes (pixels) already on the plot, as one array: whether a candidate label overlaps any of
    them is one vectorized test instead of a Python loop of Bbox.overlaps (on a 500-row reference the
    loop made placing the labels 18 of the plot's 20 seconds). Same rule as Bbox.overlaps: closed
    intervals, extents taken in increasing order."""

    def __init__(self, boxes=()) -> None:
        self._extents = np.array([self._ordered(box) for box in boxes]).reshape(-1, 4)

    @staticmethod
    def _ordered(box) -> np.ndarray:
        x0, y0, x1, y1 = box.extents
        return np.array([min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)])

    def add(self, box) -> None:
        self._extents = np.vstack([self._extents, self._ordered(box)])

    def hits(self, box) -> bool:
        ax0, ay0, ax1, ay1 = self._ordered(box)
        e = self._extents
        return bool(np.any((ax0 <= e[:, 2]) & (e[:, 0] <= ax1) & (ay0 <= e[:, 3]) & (e[:, 1] <= ay1)))


# Offsets (pixels) tried around a point, nearest first: right, left, above, below, the diagonals.
_DIRECTIONS = ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, 1), (1, -1), (-1, -1))


def _align(artist, dx: int, dy: int) -> None:
    # The text's corner or edge that faces the point it labels, for a spot in direction (dx, dy).
    artist.set_ha("left" if dx > 0 else "right" if dx < 0 else "center")
    artist.set_va("bottom" if dy > 0 else "top" if dy < 0 else "center")


def _place(ax, renderer, frame, taken: _Taken, text: str, colour: str, anchors, bold: bool) -> None:
    weight = "bold" if bold else "normal"
    # A faint white box: a roof line running under a label does not cross its letters.
    backing = {"facecolor": "white", "alpha": 0.75, "edgecolor": "none", "pad": 0.4}
    artist = ax.text(0, 0, text, fontsize=LABEL_POINTS, color=colour, fontweight=weight, transform=None, bbox=backing)
    # The label's box at the origin for each direction's alignment, laid out once: a candidate spot's
    # box is that box moved there (a text's extent in pixels does not change with its position).
    at_origin = {}
    for dx, dy in _DIRECTIONS:
        _align(artist, dx, dy)
        at_origin[dx, dy] = artist.get_window_extent(renderer)
    for distance in (8, 18, 32, 50, 70):
        for x, y in anchors:
            for dx, dy in _DIRECTIONS:
                box = at_origin[dx, dy].translated(x + dx * distance, y + dy * distance).padded(1)
                inside = frame.x0 < box.x0 and box.x1 < frame.x1 and frame.y0 < box.y0 and box.y1 < frame.y1
                if inside and not taken.hits(box):
                    artist.set_position((x + dx * distance, y + dy * distance))
                    _align(artist, dx, dy)
                    taken.add(box)
                    # Found in pixels; kept in data coordinates, so the SVG (drawn at 72 dpi) matches the PNG.
                    to_data = ax.transData.inverted()
                    artist.set_position(to_data.transform(artist.get_position()))
                    artist.set_transform(ax.transData)
                    artist.set_gid("point-label")
                    if distance > 8:
                        # A leader line back to the point, for labels pushed away from the crowd.
                        ends = to_data.transform([(x, y), (x + dx * (distance - 3), y + dy * (distance - 3))])
                        ax.add_line(Line2D(ends[:, 0], ends[:, 1], color=colour, lw=0.5, alpha=0.7))
                    return
    artist.remove()  # no free spot: the colour and marker still tell the point, the CSV names it
