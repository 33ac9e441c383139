"""Render a report model (rooflint.outputs.report.build_report) as Markdown or as one self-contained HTML file."""

from __future__ import annotations

import base64
import html
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from rooflint.outputs.results import OK

# (header, field, format) of the per-family table; format None means text.
TABLE = (
    ("time ms", "median_ms", "{:.4g}"),
    ("TFLOP/s", "achieved_tflops", "{:.3g}"),
    ("GB/s", "achieved_gbps", "{:.4g}"),
    ("AI", "ai_flop_per_byte", "{:.3g}"),
    ("% of roof", "pct_of_roof", "{:.1f}"),
    ("bound", "bound", None),
    ("vs eager", "speedup_vs_eager", "{:.2f}x"),
    ("lint", "lint", None),
)


def _fmt(value: Any, pattern: str | None) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return pattern.format(value) if pattern else str(value)


def _varying(rows: list[dict[str, Any]]) -> list[str]:
    """dtype and shape get their own columns only where a family's rows differ in them."""
    return [name for name in ("dtype", "shape") if len({r[name] for r in rows}) > 1]


def _variant_cell(row: dict[str, Any]) -> str:
    if row["status"] == OK:
        return str(row["variant"])
    why = (row.get("message") or "").splitlines()[0][:90] if row.get("message") else ""
    return f"{row['variant']} ({row['status']}{': ' + why if why else ''})"


def _header(report: dict[str, Any]) -> list[str]:
    summary = report["summary"]
    sources = ", ".join(f"`{Path(s).as_posix()}`" for s in report["sources"])
    text = f"{summary['rows']} rows ({summary['ok']} ok, {summary['not_ok']} not ok)"
    if sources:
        text += f" from {sources}"
    if summary.get("duplicates_dropped"):
        text += f"; {summary['duplicates_dropped']} duplicate rows dropped, the newest timestamp of each kept"
    return [text + "."]


def _environment(section) -> str:
    env = section.environment
    parts = [env["device_name"] or section.gpu]
    for label, name in (("torch", "torch_version"), ("triton", "triton_version"), ("CUDA", "cuda_version")):
        if env[name]:
            parts.append(f"{label} {env[name]}")
    if env["git_commit"]:
        parts.append(f"commit {env['git_commit'][:10]}")
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
        legend.append(
            f"{mark}  {point['label']}: AI {point['ai_flop_per_byte']:.3g} FLOP/B, "
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


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(rows: list[dict[str, Any]]) -> list[str]:
    extra = _varying(rows)
    headers = ["variant"] + extra + [h for h, _, _ in TABLE]
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(["---"] * (1 + len(extra)) + ["---:" if p else "---" for _, _, p in TABLE]) + "|",
    ]
    for row in rows:
        ok = row["status"] == OK
        cells = [_md_escape(_variant_cell(row))] + [
            f"`{row[name]}`" if name == "shape" else row[name] for name in extra
        ]
        cells += [_md_escape(_fmt(row[name], pattern)) if ok or name == "lint" else "" for _, name, pattern in TABLE]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def _across_cell(cell: dict[str, Any] | None) -> str:
    if not cell:
        return ""
    if cell["status"] != OK:
        return cell["status"]
    pct = f" ({cell['pct_of_roof']:.0f}%)" if cell["pct_of_roof"] is not None else ""
    return f"{cell['median_ms']:.4g}{pct}"


def render_markdown(report: dict[str, Any], base: Path | None = None) -> str:
    """Markdown for a job summary or a PR comment. `base` is the report's directory, for image links."""
    lines = ["# rooflint report", ""] + _header(report)
    if report["across_gpus"]:
        gpus = report["across_gpus"][0]["gpus"]
        lines += ["", "## Across GPUs", "", "time in ms (% of that GPU's roof)", ""]
        lines.append("| family | variant | dtype | shape | " + " | ".join(gpus) + " |")
        lines.append("|---|---|---|---|" + "---:|" * len(gpus))
        for item in report["across_gpus"]:
            cells = [_across_cell(item["by_gpu"].get(g)) for g in gpus]
            lines.append(
                f"| {item['family']} | {item['variant']} | {item['dtype']} | `{item['shape']}` | "
                + " | ".join(cells)
                + " |"
            )
    for section in report["_sections"]:
        lines += ["", f"## {section.gpu or 'unknown GPU'}: {section.name}", "", _environment(section), ""]
        lines.append(_ceilings(section) + ".")
        if section.images.get("png") and base is not None:
            link = Path(os.path.relpath(section.images["png"], base)).as_posix()
            lines += ["", f"![roofline on {section.gpu}]({link})"]
        if section.spec is not None and section.points is not None:
            text = text_roofline(section.points, section.spec.bandwidth_gbps, section.roofs)
            if text:
                lines += ["", "```text", text, "```"]
        for family, rows in section.families.items():
            lines += ["", f"### {family}", ""] + _md_table(rows)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- HTML

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:14px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3;cursor:pointer;user-select:none}
td:first-child,th:first-child{text-align:left}
th[data-order=asc]::after{content:" \\25B2"}th[data-order=desc]::after{content:" \\25BC"}
.gpu{display:flex;gap:2em;align-items:flex-start;flex-wrap:wrap}
.gpu figure{position:sticky;top:1em;margin:0;max-width:640px}
.gpu figure img{width:100%}
tr.notok td{color:#a33}
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


def _html_table(rows: list[dict[str, Any]]) -> str:
    extra = _varying(rows)
    head = "".join(f"<th>{_esc(h)}</th>" for h in ["variant"] + extra + [h for h, _, _ in TABLE])
    body = []
    for row in rows:
        ok = row["status"] == OK
        cells = [f"<td>{_esc(_variant_cell(row))}</td>"] + [f"<td>{_esc(row[name])}</td>" for name in extra]
        for _, name, pattern in TABLE:
            value = row[name] if ok or name == "lint" else None
            raw = f' data-v="{value}"' if isinstance(value, (int, float)) and math.isfinite(value) else ""
            cells.append(f"<td{raw}>{_esc(_fmt(value, pattern))}</td>")
        body.append(f'<tr class="{"ok" if ok else "notok"}">' + "".join(cells) + "</tr>")
    return f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def render_html(report: dict[str, Any]) -> str:
    """One self-contained file: the rooflines are embedded as base64 PNGs, the sorting is inline JS."""
    parts = [f"<h1>rooflint report</h1><p>{_esc(_header(report)[0].replace('`', ''))}</p>"]
    if report["across_gpus"]:
        gpus = report["across_gpus"][0]["gpus"]
        head = "".join(f"<th>{_esc(h)}</th>" for h in ["family", "variant", "dtype", "shape"] + gpus)
        body = "".join(
            "<tr>"
            + "".join(f"<td>{_esc(item[k])}</td>" for k in ("family", "variant", "dtype", "shape"))
            + "".join(f"<td>{_esc(_across_cell(item['by_gpu'].get(g)))}</td>" for g in gpus)
            + "</tr>"
            for item in report["across_gpus"]
        )
        parts.append(
            "<h2>Across GPUs</h2><p>time in ms (% of that GPU's roof)</p>"
            f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
        )
    for section in report["_sections"]:
        tables = "".join(f"<h3>{_esc(f)}</h3>{_html_table(rows)}" for f, rows in section.families.items())
        figure = ""
        if section.images.get("png"):
            data = base64.b64encode(Path(section.images["png"]).read_bytes()).decode("ascii")
            figure = (
                f'<figure><img alt="roofline on {_esc(section.gpu)}" src="data:image/png;base64,{data}">'
                f"<figcaption>roofline on {_esc(section.name)}</figcaption></figure>"
            )
        parts.append(
            f"<h2>{_esc(section.gpu or 'unknown GPU')}: {_esc(section.name)}</h2>"
            f"<p>{_esc(_environment(section))}<br>{_esc(_ceilings(section))}</p>"
            f'<div class="gpu"><div>{tables}</div>{figure}</div>'
        )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>rooflint report</title>'
        f"<style>{_STYLE}</style></head><body>{''.join(parts)}<script>{_SCRIPT}</script></body></html>\n"
    )
