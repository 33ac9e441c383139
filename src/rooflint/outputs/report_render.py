"""Render a report model (rooflint.outputs.report.build_report) as Markdown or as one self-contained HTML file."""

from __future__ import annotations

import base64
import html
import math
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pandas as pd

from rooflint.core.fmt import counted, finite, text
from rooflint.outputs.interactive import SCRIPT as INTERACTIVE_SCRIPT
from rooflint.outputs.interactive import STYLE as INTERACTIVE_STYLE
from rooflint.outputs.interactive import TOOLTIP, median_power, point_id, render_section
from rooflint.outputs.merge import dropped_note
from rooflint.outputs.results import OK

# (header, field, format) of the per-family table; format None means text.
TABLE = (
    ("time ms", "median_ms", "{:.4g}"),
    ("tok/s", "tokens_per_s", "{:.4g}"),
    ("TFLOP/s", "achieved_tflops", "{:.3g}"),
    ("GB/s", "achieved_gbps", "{:.4g}"),
    ("AI", "ai_flop_per_byte", "{:.3g}"),
    ("% of roof", "pct_of_roof", "{:.1f}"),
    ("floor ms", "floor_ms", "{:.4g}"),
    ("% of floor", "pct_of_floor", "{:.1f}"),
    ("context", "context", "{:.0f}"),
    ("bound", "bound", None),
    ("vs eager", "speedup_vs_eager", "{:.2f}x"),
    ("vs best compile", "speedup_vs_best_compile", "{:.2f}x"),
    ("vs best library", "speedup_vs_best_library", "{:.2f}x"),
    ("extra MiB", "peak_extra_memory_bytes", "{:.4g}"),
    ("mJ/call", "energy_per_call_j", "{:.3g}"),
    ("GFLOP/J", "flop_per_j", "{:.3g}"),
    ("GB/J", "bytes_per_j", "{:.3g}"),
    ("W", "power_median_w", "{:.0f}"),
    ("lint", "lint", None),
)
# The energy columns (NVML) appear only in tables with at least one reading; CPU runs have none.
ENERGY_FIELDS = ("energy_per_call_j", "flop_per_j", "bytes_per_j", "power_median_w")
# Stored in SI units (J, FLOP/J, B/J); shown in units that keep a kernel's numbers short.
SCALE = {"energy_per_call_j": 1e3, "flop_per_j": 1e-9, "bytes_per_j": 1e-9, "peak_extra_memory_bytes": 2**-20}


def _cell(value: Any, pattern: str | None, name: str = "") -> str:
    """A table cell: a number through its TABLE pattern, text as written; missing ones stay empty."""
    if pattern is None:
        return text(value)
    return pattern.format(value * SCALE.get(name, 1.0)) if finite(value) else ""


# A model's columns (tok/s, its phase floor, the decode context) appear only in tables of model rows.
MODEL_FIELDS = ("tokens_per_s", "floor_ms", "pct_of_floor", "context")
OPTIONAL_FIELDS = (
    *ENERGY_FIELDS,
    *MODEL_FIELDS,
    "speedup_vs_best_compile",
    "speedup_vs_best_library",
    "peak_extra_memory_bytes",
)


def _columns(rows: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    """TABLE without the columns no row has a value for: energy without NVML, "vs best compile"
    in a family or run without compiled variants, "vs best library" where no library peer ran, the
    extra memory on a CPU (measured on CUDA only)."""
    present = {name for name in OPTIONAL_FIELDS if any(finite(r.get(name)) for r in rows)}
    return [column for column in TABLE if column[1] not in OPTIONAL_FIELDS or column[1] in present]


def energy_note(section) -> str:
    """One line on where the energy numbers come from, or why there are none."""
    rows = [r for rows in section.families.values() for r in rows if r["status"] == OK]
    measured = [r for r in rows if finite(r.get("energy_per_call_j"))]
    if not measured:
        return "energy: no energy measured (needs NVML)"
    watts = median_power(measured)
    power = f", median power {watts:.0f} W" if finite(watts) else ""
    return (
        f"energy: {len(measured)} of {len(rows)} ok rows measured by NVML's total-energy counter "
        f"over their timed calls{power}"
    )


def _varying(rows: list[dict[str, Any]]) -> list[str]:
    """dtype and shape get their own columns only where a family's rows differ in them; the regime
    only where timed rows differ in it (a burst run merged with a sustained one), and the timing mode
    only where some rows were timed by CUDA-graph replays and others not (a `--cuda-graphs` run merged
    with an event-timed one), else two lines of one variant read alike."""
    names = [name for name in ("dtype", "shape") if len({r[name] for r in rows}) > 1]
    graphed = {(r.get("timing_mode") or "") == "cuda_graph" for r in rows if r.get("timing_mode")}
    return names + ["regime"] * _several_regimes(rows) + ["timing_mode"] * (len(graphed) > 1)


def _several_regimes(rows: list[dict[str, Any]]) -> bool:
    """Whether rows were timed in more than one regime (a row never timed has none)."""
    return len({r.get("regime") or "" for r in rows} - {""}) > 1


def _several_timings(items: list[dict[str, Any]]) -> bool:
    """Whether the across-GPU lines hold both CUDA-graph replays and rows timed otherwise."""
    return len({bool(item.get("cuda_graphs")) for item in items}) > 1


def _variant_cell(row: dict[str, Any]) -> str:
    name = str(row["variant"])
    if row.get("library"):  # a third-party peer: say whose kernel, and which release, was timed
        name += f" [{' '.join(filter(None, (row['library'], row.get('library_version'))))}]"
    if row["status"] == OK:
        return name
    why = (row.get("message") or "").splitlines()[0][:90] if row.get("message") else ""
    return f"{name} ({row['status']}{': ' + why if why else ''})"


def _header(report: dict[str, Any], source=lambda path: path) -> list[str]:
    """The summary line; ``source`` writes each results file's name (a code span in Markdown)."""
    summary = report["summary"]
    sources = ", ".join(source(Path(s).as_posix()) for s in report["sources"])
    text = f"{summary['rows']} rows ({summary['ok']} ok, {summary['not_ok']} not ok)"
    if sources:
        text += f" from {sources}"
    if summary.get("duplicates_dropped"):
        text += f"; {dropped_note(summary['duplicates_dropped'])}"
    failing = summary.get("did_not_pass") or {}
    if failing:
        # "8 not ok" alone read as skips (no GPU, no nvcc here) over a run that exits 1 on a crash.
        counts = ", ".join(f"{count} {status}" for status, count in failing.items())
        text += f". {counted(sum(failing.values()), 'row')} did not pass ({counts})"
    return [text + "."]


def _environment(section) -> str:
    env = section.environment
    parts = [env["device_name"] or section.gpu]
    for label, name in (("torch", "torch_version"), ("triton", "triton_version"), ("CUDA", "cuda_version")):
        if env[name]:
            parts.append(f"{label} {env[name]}")
    if env["git_commit"]:
        parts.append(f"commit {', '.join(c[:10] for c in env['git_commit'].split(', '))}")
    if env["timestamp"]:
        parts.append(env["timestamp"])
    return " · ".join(parts)


def _ceilings(section) -> str:
    if section.spec is None:
        return "no ceilings known for this GPU"
    spec = section.spec
    peaks = ", ".join(f"{label} {value:.4g} TFLOP/s" for label, value in sorted(section.roofs.items()))
    return f"ceilings ({section.ceiling_source}): {spec.bandwidth_gbps:.4g} GB/s" + (f", {peaks}" if peaks else "")


# ------------------------------------------------------------------------------------ text roofline


def text_roofline(points: pd.DataFrame, bandwidth_gbps: float, roofs: dict[str, float], width=64, height=16) -> str:
    """A log-log roofline in plain text: renders in job summaries and PR comments, where images
    embedded as data: URIs are stripped. '/' is the bandwidth roof, '-' the compute roofs, letters
    are the measured points (listed below the plot)."""
    points = points.reset_index(drop=True)
    if points.empty or not roofs:
        return ""
    top = max(roofs.values())
    ridge = top * 1e3 / bandwidth_gbps  # AI where the bandwidth roof meets the highest compute roof
    x_lo = math.log10(min(points["ai_flop_per_byte"].min(), ridge) / 4)
    x_hi = math.log10(max(points["ai_flop_per_byte"].max(), ridge) * 4)
    y_lo = math.log10(min(points["achieved_tflops"].min(), bandwidth_gbps * 10**x_lo / 1e3) / 2)
    y_hi = math.log10(top * 2)
    grid = [[" "] * width for _ in range(height)]

    def column(ai: float) -> int:
        return round((math.log10(ai) - x_lo) / (x_hi - x_lo) * (width - 1))

    def row(tflops: float) -> int:
        return height - 1 - round((math.log10(tflops) - y_lo) / (y_hi - y_lo) * (height - 1))

    for c in range(width):
        ai = 10 ** (x_lo + (x_hi - x_lo) * c / (width - 1))
        for peak in roofs.values():
            memory = bandwidth_gbps * ai / 1e3
            r = row(min(peak, memory))
            if 0 <= r < height:
                grid[r][c] = "/" if memory < peak else "-"
    legend = []
    for i, point in points.iterrows():
        mark = chr(ord("A") + i) if i < 26 else "*"
        r, c = row(point["achieved_tflops"]), column(point["ai_flop_per_byte"])
        # Points in one cell (variants of equal speed) move right, so every letter stays visible.
        while 0 <= c < width - 1 and grid[r if 0 <= r < height else 0][c].isalpha():
            c += 1
        if 0 <= r < height and 0 <= c < width:
            grid[r][c] = mark
        label = " ".join(str(point["label"]).splitlines())  # a name's newline must not split its legend line
        legend.append(
            f"{mark}  {label}: AI {point['ai_flop_per_byte']:.3g} FLOP/B, "
            f"{point['achieved_tflops']:.3g} TFLOP/s, {point['achieved_gbps']:.4g} GB/s"
        )
    lines = []
    for r, cells in enumerate(grid):
        label = f"{10 ** (y_hi - (y_hi - y_lo) * r / (height - 1)):9.3g} |" if r in (0, height - 1) else " " * 10 + "|"
        lines.append(label + "".join(cells).rstrip())
    lines.append(" " * 10 + "+" + "-" * width)
    left, right = f"{10**x_lo:.3g}", f"{10**x_hi:.3g}"
    lines.append(" " * 11 + left + " " * max(1, width - len(left) - len(right)) + right)
    lines.append(" " * 11 + "TFLOP/s (y) against arithmetic intensity in FLOP/byte (x), log-log")
    return "\n".join(lines + [""] + legend)


# ------------------------------------------------------------------------------------------ Markdown


# Characters that make Markdown out of text: code, links and images, emphasis, strikethrough, cells.
_MD_ACTIVE = re.compile(r"[\\`*\[\]|~]|(?<!\w)_|_(?!\w)")


def md_text(value: Any) -> str:
    """Text from a results file as Markdown that shows it as written and renders nothing of its own:
    a family named ``<script>`` is text, never HTML, as in the HTML report. Underscores inside a
    word (vector_add) stay as they are: they never start emphasis."""
    # < and & alone start HTML (tags, entities); a > inside a line is plain text.
    escaped = " ".join(str(value).splitlines()).replace("&", "&amp;").replace("<", "&lt;")
    return _MD_ACTIVE.sub(lambda match: "\\" + match.group(0), escaped)


def md_span(value: Any) -> str:
    """A code span outside a table that shows ``value`` as written: fenced by more backticks than any
    run inside it, so a file named a`b.csv neither ends the span early nor loses its backtick."""
    value = " ".join(str(value).splitlines())
    fence = "`" * (max((len(run) for run in re.findall("`+", value)), default=0) + 1)
    pad = " " if "`" in value else ""  # CommonMark strips one space each side: a leading ` stays text
    return f"{fence}{pad}{value}{pad}{fence}"


def md_code(value: Any) -> str:
    """Text for inside a `code span` (shapes): no backtick can end it, no pipe can end its cell."""
    return " ".join(str(value).splitlines()).replace("`", "'").replace("|", "\\|")


def _md_table(rows: list[dict[str, Any]]) -> list[str]:
    extra = _varying(rows)
    columns = _columns(rows)
    headers = ["variant"] + extra + [h for h, _, _ in columns]
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(["---"] * (1 + len(extra)) + ["---:" if p else "---" for _, _, p in columns]) + "|",
    ]
    for row in rows:
        ok = row["status"] == OK
        cells = [md_text(_variant_cell(row))] + [
            f"`{md_code(row[name])}`" if name == "shape" else md_text(row[name]) for name in extra
        ]
        cells += [
            md_text(_cell(row[name], pattern, name)) if ok or name == "lint" else "" for _, name, pattern in columns
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def _across_cell(cell: dict[str, Any] | None) -> str:
    if not cell:
        return ""
    if cell["status"] != OK:
        return cell["status"]
    pct = f" ({cell['pct_of_roof']:.0f}%)" if cell["pct_of_roof"] is not None else ""
    return f"{cell['median_ms']:.4g}{pct}"


def _yes_no(flag: Any) -> str:
    return "yes" if flag else "no"


def render_markdown(report: dict[str, Any], base: Path | None = None) -> str:
    """Markdown for a job summary or a PR comment. `base` is the report's directory, for image links."""
    lines = ["# rooflint report", ""] + _header(report, md_span)
    if report["across_gpus"]:
        gpus = report["across_gpus"][0]["gpus"]
        regime = _several_regimes(report["across_gpus"])
        graphs = _several_timings(report["across_gpus"])
        lines += ["", "## Across GPUs", "", "time in ms (% of that GPU's roof)", ""]
        lines.append(
            "| family | variant | dtype | shape | "
            + "regime | " * regime
            + "CUDA graphs | " * graphs
            + " | ".join(md_text(g) for g in gpus)
            + " |"
        )
        lines.append("|---|---|---|---|" + "---|" * (regime + graphs) + "---:|" * len(gpus))
        for item in report["across_gpus"]:
            cells = [md_text(item["regime"])] * regime + [_yes_no(item.get("cuda_graphs"))] * graphs
            cells += [_across_cell(item["by_gpu"].get(g)) for g in gpus]
            lines.append(
                f"| {md_text(item['family'])} | {md_text(item['variant'])} | {md_text(item['dtype'])} | "
                f"`{md_code(item['shape'])}` | " + " | ".join(cells) + " |"
            )
    for section in report["_sections"]:
        heading = f"{md_text(section.gpu) or 'unknown GPU'}: {md_text(section.name)}"
        lines += ["", f"## {heading}", "", md_text(_environment(section)), ""]
        lines.append(md_text(_ceilings(section)) + ".")
        lines += ["", energy_note(section) + "."]
        if section.images.get("png") and base is not None:
            # Percent-encoded: the name carries the GPU's, and a space, quote or <, > in it ended the
            # link early (CommonMark reads `(a "b")` as a link with a title), leaving no image and
            # the rest of the name as raw text, a <tag> in it as HTML.
            link = quote(Path(os.path.relpath(section.images["png"], base)).as_posix())
            lines += ["", f"![roofline on {md_text(section.gpu)}]({link})"]
        if section.spec is not None and section.points is not None:
            text = text_roofline(section.points, section.spec.bandwidth_gbps, section.roofs)
            text = text.replace("`", "'")  # a label from the file must not close the code fence
            if text:
                lines += ["", "```text", text, "```"]
        for family, rows in section.families.items():
            lines += ["", f"### {md_text(family)}", ""] + _md_table(rows)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- HTML

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:14px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3;cursor:pointer;user-select:none}
td:first-child,th:first-child{text-align:left}
th[data-order=asc]::after{content:" \\25B2"}th[data-order=desc]::after{content:" \\25BC"}
tr.notok td{color:#a33}
details.static img{max-width:100%}
"""

# Click a header to sort by that column; numbers sort numerically (data-v holds the raw value).
_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th) {
  th.addEventListener("click", function () {
    var body = th.closest("table").tBodies[0], i = th.cellIndex;
    var asc = th.dataset.order !== "asc";
    th.parentNode.querySelectorAll("th").forEach(function (h) { delete h.dataset.order; });
    th.dataset.order = asc ? "asc" : "desc";
    var key = function (tr) {
      var c = tr.cells[i], v = c.dataset.v !== undefined ? c.dataset.v : c.textContent, n = parseFloat(v);
      return isNaN(n) ? [1, v] : [0, n];
    };
    Array.from(body.rows).sort(function (a, b) {
      var x = key(a), y = key(b), c = x[0] - y[0] || (x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0);
      return asc ? c : -c;
    }).forEach(function (tr) { body.appendChild(tr); });
  });
});
"""


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _html_table(rows: list[dict[str, Any]], family: str = "", section_index: int = 0) -> str:
    """A sortable table; each line carries its point's data-point, so hovering it marks the point."""
    extra = _varying(rows)
    columns = _columns(rows)
    head = "".join(f"<th>{_esc(h)}</th>" for h in ["variant"] + extra + [h for h, _, _ in columns])
    body = []
    for index, row in enumerate(rows):
        ok = row["status"] == OK
        cells = [f"<td>{_esc(_variant_cell(row))}</td>"] + [f"<td>{_esc(row[name])}</td>" for name in extra]
        for _, name, pattern in columns:
            value = row[name] if ok or name == "lint" else None
            raw = f' data-v="{value}"' if isinstance(value, (int, float)) and math.isfinite(value) else ""
            cells.append(f"<td{raw}>{_esc(_cell(value, pattern, name))}</td>")
        point = f' data-point="{_esc(point_id(section_index, family, index))}"' if family else ""
        body.append(f'<tr class="{"ok" if ok else "notok"}"{point}>' + "".join(cells) + "</tr>")
    return f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def render_html(report: dict[str, Any]) -> str:
    """One self-contained file: per GPU an interactive roofline (inline SVG and script, see
    rooflint.outputs.interactive) with the energy roofline beside it, the static PNG, and sortable
    tables. Nothing is fetched: no library, no font, no image from elsewhere."""
    parts = [f"<h1>rooflint report</h1><p>{_esc(_header(report)[0])}</p>"]
    if "counters_matched" in report["summary"]:
        parts.append(f"<p>ncu counters matched {report['summary']['counters_matched']} rows.</p>")
    if report["across_gpus"]:
        gpus = report["across_gpus"][0]["gpus"]
        keys = ["family", "variant", "dtype", "shape"] + ["regime"] * _several_regimes(report["across_gpus"])
        graphs = _several_timings(report["across_gpus"])
        head = "".join(f"<th>{_esc(h)}</th>" for h in keys + ["CUDA graphs"] * graphs + gpus)
        body = "".join(
            "<tr>"
            + "".join(f"<td>{_esc(item[k])}</td>" for k in keys)
            + f"<td>{_yes_no(item.get('cuda_graphs'))}</td>" * graphs
            + "".join(f"<td>{_esc(_across_cell(item['by_gpu'].get(g)))}</td>" for g in gpus)
            + "</tr>"
            for item in report["across_gpus"]
        )
        parts.append(
            "<h2>Across GPUs</h2><p>time in ms (% of that GPU's roof)</p>"
            f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
        )
    for index, section in enumerate(report["_sections"]):
        tables = "".join(f"<h3>{_esc(f)}</h3>{_html_table(rows, f, index)}" for f, rows in section.families.items())
        static = ""
        if section.images.get("png"):
            data = base64.b64encode(Path(section.images["png"]).read_bytes()).decode("ascii")
            static = (
                f'<details class="static"><summary>static roofline (the PNG beside this report, for papers '
                f'and CI summaries)</summary><img alt="roofline on {_esc(section.gpu)}" '
                f'src="data:image/png;base64,{data}"></details>'
            )
        parts.append(
            f"<h2>{_esc(section.gpu or 'unknown GPU')}: {_esc(section.name)}</h2>"
            f"<p>{_esc(_environment(section))}<br>{_esc(_ceilings(section))}<br>{_esc(energy_note(section))}</p>"
            f"{render_section(section, index)}{static}{tables}"
        )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>rooflint report</title>'
        f"<style>{_STYLE}{INTERACTIVE_STYLE}</style></head><body>{''.join(parts)}{TOOLTIP}"
        f"<script>{_SCRIPT}{INTERACTIVE_SCRIPT}</script></body></html>\n"
    )
