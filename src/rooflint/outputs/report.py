"""Reports for people and for CI: Markdown, one self-contained HTML file, and versioned JSON.

All three formats render one model (build_report), so they never disagree. Per GPU there is one
roofline (PNG/SVG/CSV through rooflint.outputs.plot) and, per family, a table of its variants. Results
merged from several GPUs also get a table across GPUs.

GitHub strips data: URIs from Markdown, so a job summary or a pull-request comment cannot show an
embedded PNG. The Markdown report therefore links the PNG (it renders where the file sits beside
the report: an artifact, a repository) and also carries a text roofline in a code block, which
renders everywhere. The HTML report embeds the images as base64 and needs no other file.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from rooflint.core.errors import UserError
from rooflint.core.fmt import text as text_cell
from rooflint.core.paths import write_text
from rooflint.core.specs import GpuSpec, spec_from_rows
from rooflint.outputs.points import points_from_results
from rooflint.outputs.results import FAILING_STATUSES, OK

if TYPE_CHECKING:
    from rooflint.outputs.merge import Merged

REPORT_SCHEMA = "rooflint.report/1"
FORMATS = ("md", "html", "json")

# Per-variant fields a report row carries, in table order (JSON keeps the same names).
ROW_FIELDS = (
    "variant",
    "kind",
    "dtype",
    "shape",
    "regime",  # burst | sustained; "" on a row that was never timed
    "timing_mode",  # cuda_events, cuda_graph, cpu_wall, ...; "" on a row that was never timed
    "status",
    "message",
    "median_ms",
    "p20_ms",
    "p80_ms",
    "achieved_tflops",
    "achieved_gbps",
    "ai_flop_per_byte",
    "pct_of_roof",
    "bound",
    "speedup_vs_eager",
    "speedup_vs_best_compile",
    "speedup_vs_best_library",
    "lint",
    "library",  # a library row's third-party distribution and version; empty for rooflint's own
    "library_version",
    "peak_extra_memory_bytes",  # allocated beyond inputs and outputs (cross_entropy's logits, a workspace)
    # for the interactive roofline: the command that reproduces a row, its energy, its ncu bytes
    "size",
    "energy_per_call_j",
    "flop_per_j",
    "bytes_per_j",
    "power_median_w",
    "measured_dram_bytes",  # from `rooflint profile --ncu` counters (report --counters), else null
    "measured_ai_flop_per_byte",  # the row's FLOPs over those bytes
    # a model row's phase and throughput (rooflint model); empty on kernel rows
    "phase",
    "batch",
    "context",
    "tokens_per_s",
    "floor_ms",
    "pct_of_floor",
)
# The numeric ones: JSON-safe numbers (NaN -> null); the rest are text cells.
_NUMBER_SUFFIXES = ("_ms", "tflops", "gbps", "byte", "bytes", "roof", "eager", "_compile", "_library", "_j", "_w")
REPORT_NUMBER_COLUMNS = {name for name in ROW_FIELDS if name.endswith(_NUMBER_SUFFIXES)} | {
    "batch",
    "context",
    "tokens_per_s",
    "pct_of_floor",
}


def _clean(value: Any) -> Any:
    """JSON-safe: NaN becomes null, numpy scalars become Python ones."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass
class GpuSection:
    gpu: str
    name: str
    spec: GpuSpec | None
    ceiling_source: str
    environment: dict[str, str]
    families: dict[str, list[dict[str, Any]]]
    images: dict[str, str] = field(default_factory=dict)  # png/svg/csv -> path
    roofs: dict[str, float] = field(default_factory=dict)  # "cuda fp32" -> peak TFLOP/s the rows are bound by
    points: pd.DataFrame | None = None


# A row's baselines are rows of its family, dtype, shape and GPU timed in its regime and the same way:
# a burst row is never judged against a sustained one (a merge of both runs holds the two), nor a
# CUDA-graph replay (no launch gap, no L2 flush between calls) against an event-timed call.
_SHAPE_KEY = ["family", "dtype", "shape", "gpu", "regime", "graphed"]
# core.family.LIBRARY_KIND, spelt out: core.family imports torch, which a report never needs.
LIBRARY_KIND = "library"


def _keyed(frame: pd.DataFrame) -> pd.DataFrame:
    """frame with its regime column as text ("" where empty or absent) and whether CUDA-graph replays
    timed it, so that it groups and matches."""
    regime = frame["regime"].map(text_cell) if "regime" in frame else ""
    graphed = frame["timing_mode"].map(text_cell) == "cuda_graph" if "timing_mode" in frame else False
    return frame.assign(regime=regime, graphed=graphed)


def _base_over_row(frame: pd.DataFrame, base_ms: dict[tuple, float]) -> pd.Series:
    """base_ms[(family, dtype, shape, gpu, regime, graphed)] / the row's median for each ok row with a
    base, else NaN."""
    keys = _keyed(frame)[_SHAPE_KEY].itertuples(index=False, name=None)
    base = pd.Series([base_ms.get(key, math.nan) for key in keys], index=frame.index, dtype=float)
    median = pd.to_numeric(frame["median_ms"], errors="coerce")
    return (base / median).where((frame["status"] == OK) & (median > 0) & (base > 0))


def _speedups(frame: pd.DataFrame) -> pd.Series:
    """speedup_vs_eager as recorded, or eager median / this median where the row lacks it."""
    eager = frame[(frame["kind"] == "eager") & (frame["status"] == OK)]
    recorded = pd.to_numeric(frame["speedup_vs_eager"], errors="coerce")
    computed = _base_over_row(frame, _keyed(eager).groupby(_SHAPE_KEY)["median_ms"].last().to_dict())
    return recorded.where(recorded.abs() < math.inf, computed)


def _vs_best_compile(frame: pd.DataFrame) -> pd.Series:
    """The fastest ok torch.compile form of the same family, dtype, shape and GPU over this row's
    median: a kernel is judged against the best compiled baseline a user could write (the unfused
    form, the built-in op, max-autotune), never the weakest (softmax's unfused compile
    was 1.5x slower than its natural form)."""
    compiled = frame[(frame["kind"] == "compile") & (frame["status"] == OK)]
    return _base_over_row(frame, _keyed(compiled).groupby(_SHAPE_KEY)["median_ms"].min().to_dict())


def _vs_best_library(frame: pd.DataFrame) -> pd.Series:
    """The fastest ok library peer (FlashAttention, FlashInfer, Liger, quack) of the same family,
    dtype, shape and GPU over this row's median: above 1 where the row beats every library that ran."""
    peers = frame[(frame["kind"] == LIBRARY_KIND) & (frame["status"] == OK)]
    return _base_over_row(frame, _keyed(peers).groupby(_SHAPE_KEY)["median_ms"].min().to_dict())


def build_report(
    frame: pd.DataFrame,
    image_dir: Path | None = None,
    spec_file: Path | str | None = None,
    sources=(),
    counters: dict[tuple[str, str, str, str], float] | None = None,
) -> dict[str, Any]:
    """The report model every format renders. With image_dir, draws one roofline per GPU there.
    ``counters`` (rooflint.analysis.lint_input.read_counters) gives rows their ncu-measured DRAM bytes."""
    frame = frame.reset_index(drop=True).copy()
    frame["gpu"] = frame["gpu"].fillna("").astype(str)
    frame["speedup_vs_eager"] = _speedups(frame)
    frame["speedup_vs_best_compile"] = _vs_best_compile(frame)
    frame["speedup_vs_best_library"] = _vs_best_library(frame)
    matched = _add_counters(frame, counters or {})
    sections = []
    for gpu, rows in frame.groupby("gpu", sort=True):
        spec = spec_from_rows(gpu, rows.to_dict("records"), spec_file)
        families = {
            family: [
                {
                    name: _clean(r.get(name)) if name in REPORT_NUMBER_COLUMNS else text_cell(r.get(name))
                    for name in ROW_FIELDS
                }
                for r in group.to_dict("records")
            ]
            for family, group in rows.groupby("family", sort=False)
        }
        environment = _environment(rows)
        ceiling = ", ".join(sorted(set(rows["ceiling_source"].fillna("").astype(str)) - {""})) or "unknown"
        section = GpuSection(gpu, spec.name if spec else gpu, spec, ceiling, environment, families)
        points = points_from_results(rows)  # every ok row; the interactive plot keeps those it can place
        section.points = placeable(points)
        if spec is not None:
            # Sorted: a set of strings iterates in a per-process hash order, and the text roofline draws
            # the roofs in this order, so an unsorted loop made the same file render differently.
            for unit, precision in sorted(
                set(zip(rows["compute_unit"].fillna("").astype(str), rows["precision"].fillna("").astype(str)))
            ):
                peak = spec.get(f"{unit}_{precision}_tflops")
                if peak:
                    section.roofs[f"{unit} {precision}"] = peak
        if image_dir is not None and spec is not None:
            # The static image also lists the rows it cannot place (no FLOPs), so it gets every ok row.
            section.images = _draw(points, spec, Path(image_dir), several=frame["gpu"].nunique() > 1)
        sections.append(section)
    summary_extra = {"counters_matched": matched} if counters is not None else {}
    # Apart from the skips among "not ok": the rows the command exits 1 on, by status (where any).
    failing = frame["status"][frame["status"].isin(FAILING_STATUSES)].value_counts().sort_index()
    if len(failing):
        summary_extra["did_not_pass"] = {status: int(count) for status, count in failing.items()}
    return {
        "schema": REPORT_SCHEMA,
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "sources": [str(s) for s in sources],
        "summary": {
            "rows": int(len(frame)),
            "ok": int((frame["status"] == OK).sum()),
            "not_ok": int((frame["status"] != OK).sum()),
            "gpus": [s.gpu for s in sections],
            **summary_extra,
        },
        "gpus": [_section_json(s) for s in sections],
        "across_gpus": _across_gpus(frame) if len(sections) > 1 else [],
        "_sections": sections,  # for the renderers; dropped from JSON
    }


def _add_counters(frame: pd.DataFrame, counters: dict[tuple[str, str, str, str], float]) -> int:
    """Where ncu counted a row's DRAM bytes, its AI by those bytes: the analytic point's measured twin.
    Returns the number of rows matched."""
    keys = zip(*(frame[c].astype(str) for c in ("family", "variant", "dtype", "shape")))
    dram = pd.Series([counters.get(key, math.nan) for key in keys], index=frame.index, dtype=float)
    if "measured_dram_bytes" in frame:  # a results file that already carries them keeps them
        dram = dram.fillna(pd.to_numeric(frame["measured_dram_bytes"], errors="coerce"))
    units = [c for c in ("tensor_flops", "cuda_flops") if c in frame]
    flops = sum(pd.to_numeric(frame[c], errors="coerce").fillna(0.0) for c in units)
    frame["measured_dram_bytes"] = dram
    frame["measured_ai_flop_per_byte"] = (flops / dram).where(dram > 0)
    return int((dram > 0).sum())


def _section_json(section: GpuSection) -> dict[str, Any]:
    spec = section.spec
    ceilings = {name: value.value for name, value in spec.values.items()} if spec else {}
    return {
        "gpu": section.gpu,
        "name": section.name,
        "ceiling_source": section.ceiling_source,
        "ceilings": ceilings,
        "environment": section.environment,
        "roofline": section.images,
        "roofs_tflops": section.roofs,
        "families": [{"family": f, "rows": rows} for f, rows in section.families.items()],
    }


def _across_gpus(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """One line per family, variant, dtype, shape, regime and timing (CUDA-graph replays or not): a
    burst time is never set beside a sustained one, nor a graph replay's beside an event-timed call's
    (a merge keeps both), and neither hides the other. A row never timed (no regime) shows in each
    line of its key."""
    gpus = sorted(set(frame["gpu"]))
    out = []
    keyed = _keyed(frame)
    for (family, variant, dtype, shape), group in keyed.groupby(["family", "variant", "dtype", "shape"], sort=False):
        records = group.to_dict("records")
        timed = {(r["regime"], bool(r["graphed"])) for r in records if r["regime"]}
        for regime, graphed in sorted(timed) or [("", False)]:
            by_gpu = {}
            for record in records:
                if record["regime"] == "" or (record["regime"], bool(record["graphed"])) == (regime, graphed):
                    by_gpu[record["gpu"]] = {
                        "status": record["status"],
                        "median_ms": _clean(record["median_ms"]),
                        "pct_of_roof": _clean(record["pct_of_roof"]),
                    }
            item = {"family": family, "variant": variant, "dtype": dtype, "shape": shape, "regime": regime}
            out.append(dict(item, cuda_graphs=graphed, by_gpu=by_gpu))
    return [dict(item, gpus=gpus) for item in out]


def placeable(points: pd.DataFrame) -> pd.DataFrame:
    """The points a log-log roofline can place: a positive AI and rate."""
    keep = (pd.to_numeric(points["ai_flop_per_byte"], errors="coerce") > 0) & (
        pd.to_numeric(points["achieved_tflops"], errors="coerce") > 0
    )
    return points[keep].reset_index(drop=True)


def _environment(rows: pd.DataFrame) -> dict[str, str]:
    """Where and when a section's rows were measured: each field's values over its rows (", " between
    two), and the timestamps' span ("first to last").

    A section merged from several runs (one family re-run at a newer commit or torch) holds rows of
    each: its first row's commit, torch and timestamp alone were shown as every row's."""
    names = ("device_name", "torch_version", "triton_version", "cuda_version", "git_commit")
    environment = {name: ", ".join(dict.fromkeys(v for v in map(text_cell, rows[name]) if v)) for name in names}
    stamps = pd.Series([v for v in map(text_cell, rows["timestamp"]) if v], dtype=str)
    when = pd.to_datetime(stamps, utc=True, errors="coerce", format="ISO8601")
    if when.notna().any():
        first, last = stamps[when.idxmin()], stamps[when.idxmax()]
        environment["timestamp"] = first if first == last else f"{first} to {last}"
    else:  # no timestamp a reader can order: as written
        environment["timestamp"] = ", ".join(dict.fromkeys(stamps))
    return environment


def _draw(points: pd.DataFrame, spec: GpuSpec, image_dir: Path, several: bool) -> dict[str, str]:
    from rooflint.outputs.plot import plot_roofline, roofline_base

    if points.empty:
        return {}
    image_dir.mkdir(parents=True, exist_ok=True)
    base = roofline_base(image_dir, spec.key, several)
    written = plot_roofline(points, spec, base, f"rooflint: {spec.name}")
    return {Path(p).suffix.lstrip("."): str(p) for p in written}


def to_json(report: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in report.items() if not k.startswith("_")}, indent=1, default=_clean)


# The names the rooflines drawn beside a report take (outputs/plot.roofline_base): roofline.png,
# .svg, .csv, or roofline-<gpu>.* for each of several GPUs.
_IMAGE_NAME = re.compile(r"roofline(-.+)?\.(png|svg|csv)")


def refuse_image_name(out: Path) -> None:
    """A report named as one of the rooflines drawn beside it would overwrite that image (or be
    overwritten by it), leaving a report that links to itself: refuse it before any work."""
    if _IMAGE_NAME.fullmatch(out.name):
        raise UserError(
            f"--out {out}: the report draws its rooflines beside it as roofline.png/.svg/.csv "
            "(roofline-<gpu>.* for several GPUs); give the report another name, e.g. report.md or index.html"
        )


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UserError(f"unknown report format {fmt!r}; valid: {', '.join(FORMATS)}")


def write_report(
    paths: list[Path | str],
    fmt: str = "md",
    out: Path | None = None,
    spec_file: Path | str | None = None,
    image_dir: Path | None = None,
    counters: dict[tuple[str, str, str, str], float] | None = None,
    merged: Merged | None = None,
) -> str:
    """Read and merge the results files (or take ``merged``, their merge already read), render one
    report, write it to `out` (or return it)."""
    from rooflint.outputs.merge import merge_files

    check_format(fmt)
    merged = merged if merged is not None else merge_files(paths, spec_file)
    if merged.frame.empty:
        raise UserError(f"no result rows in {', '.join(str(p) for p in paths)}")
    with tempfile.TemporaryDirectory(prefix="rooflint-report-") as scratch:
        # Images sit beside the report; HTML embeds them, so a report on stdout draws into scratch.
        if image_dir is None:
            image_dir = out.parent if out is not None else (Path(scratch) if fmt == "html" else None)
        report = build_report(merged.frame, image_dir, spec_file, merged.sources, counters)
        if merged.duplicates:
            report["summary"]["duplicates_dropped"] = len(merged.duplicates)
        if fmt == "json":
            text = to_json(report)
        else:
            from rooflint.outputs.report_render import render_html, render_markdown

            base = out.parent if out is not None else None
            text = render_markdown(report, base) if fmt == "md" else render_html(report)
    if out is not None:
        write_text(out, text, "report")
    return text
