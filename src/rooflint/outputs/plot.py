"""Roofline plots: log-log FLOP/s against arithmetic intensity, every point labelled.

Every image is written with its data beside it (<name>.csv holds the points and the ceilings),
so a number read off a plot can always be traced back to a row.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: CI and GPU boxes have no display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from rooflint.core.roofline import CUDA_CORE_PRECISION  # noqa: E402
from rooflint.core.specs import TENSOR_PRECISIONS, GpuSpec  # noqa: E402

KIND_MARKERS = {"eager": "s", "eager_unfused": "v", "compile": "D", "triton": "o", "cuda": "^"}
POINT_COLUMNS = [
    "label",
    "family",
    "variant",
    "kind",
    "dtype",
    "ai_flop_per_byte",
    "achieved_tflops",
    "achieved_gbps",
    "point_kind",
    "link",
]


def ceilings_for(spec: GpuSpec, precisions: set[str] | None = None) -> list[tuple[str, float]]:
    """(label, TFLOP/s) for the CUDA-core roof and the tensor-core roofs worth drawing."""
    roofs = []
    cuda = spec.cuda_peak_tflops(CUDA_CORE_PRECISION)
    unit = "CPU" if spec.key == "cpu" else "CUDA cores"
    if cuda:
        roofs.append((f"{unit} {CUDA_CORE_PRECISION}", cuda))
    wanted = precisions or {"bf16", "fp16"}
    drawn = set()
    for precision in TENSOR_PRECISIONS:
        peak = spec.tensor_peak_tflops(precision)
        if peak and precision in wanted and peak not in drawn:
            same = [p for p in TENSOR_PRECISIONS if spec.tensor_peak_tflops(p) == peak and p in wanted]
            roofs.append((f"{'CPU matmul' if spec.key == 'cpu' else 'tensor'} {'/'.join(same)}", peak))
            drawn.add(peak)
    return roofs


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
    flops_points = points[(points["achieved_tflops"] > 0) & (points["ai_flop_per_byte"] > 0)]
    byte_only = points[~points.index.isin(flops_points.index)]
    precisions = set(points["dtype"].dropna().astype(str)) | {"bf16"}
    ais = flops_points["ai_flop_per_byte"].astype(float)
    x_low = min([0.05, *(ais / 4)]) if len(ais) else 0.05
    x_high = max([4096.0, *(ais * 4)]) if len(ais) else 4096.0

    # The plot on the left, a numbered key on the right: dozens of memory-bound points sit within
    # a factor of two of each other, and labels written beside them overlap into noise.
    listed = len(points)
    key_columns = 1 if listed <= 90 else 2
    fig = plt.figure(figsize=(11 + 4.2 * key_columns, max(7.0, 0.125 * listed / key_columns + 1.2)), dpi=110)
    grid = fig.add_gridspec(1, 2, width_ratios=[11, 4.2 * key_columns])
    ax = fig.add_subplot(grid[0, 0])
    key_ax = fig.add_subplot(grid[0, 1])
    key_ax.axis("off")
    ceiling_rows = []
    sets = [(spec.name if spec.origin in spec.name else f"{spec.name} ({spec.origin})", spec, "-")] + [
        (label, other, "--") for label, other in (extra_ceilings or [])
    ]
    for set_label, ceiling_spec, style in sets:
        bandwidth_tbps = ceiling_spec.bandwidth_gbps / 1e3
        for roof_label, peak in ceilings_for(ceiling_spec, precisions):
            ridge = peak / bandwidth_tbps
            xs = [x_low, ridge, x_high]
            ys = [x_low * bandwidth_tbps, peak, peak]
            ax.plot(xs, ys, style, linewidth=1.4, alpha=0.8, label=f"{set_label}: {roof_label} {peak:g} TFLOP/s")
            ceiling_rows.append(
                {
                    "label": f"{set_label}: {roof_label}",
                    "point_kind": "ceiling",
                    "achieved_tflops": peak,
                    "achieved_gbps": ceiling_spec.bandwidth_gbps,
                    "ai_flop_per_byte": ridge,
                }
            )
        ax.text(
            x_low * 1.1,
            x_low * 1.1 * bandwidth_tbps * 1.25,
            f"{ceiling_spec.bandwidth_gbps:g} GB/s ({ceiling_spec.origin})",
            rotation=0,
            fontsize=7,
            alpha=0.7,
        )

    families = sorted(points["family"].dropna().unique())
    colours = {f: plt.cm.tab20(i % 20) for i, f in enumerate(families)}
    key_lines: list[tuple[str, tuple]] = []
    for number, (_, point) in enumerate(flops_points.iterrows(), start=1):
        predicted = point["point_kind"] == "predicted"
        marker = KIND_MARKERS.get(point["kind"], "o") if isinstance(point["kind"], str) else "o"
        colour = colours[point["family"]]
        ax.scatter(
            point["ai_flop_per_byte"],
            point["achieved_tflops"],
            s=46,
            marker=marker,
            facecolors="none" if predicted else colour,
            edgecolors=colour,
            linestyle="--" if predicted else "-",
            zorder=3,
        )
        ax.annotate(
            str(number),
            (point["ai_flop_per_byte"], point["achieved_tflops"]),
            textcoords="offset points",
            xytext=(4, 3),
            fontsize=6.5,
            color=colour,
        )
        rate = f"{point['achieved_tflops']:.3g} TFLOP/s"
        key_lines.append((f"{number:>3} {point['label']}{' (predicted)' if predicted else ''}: {rate}", colour))
    # Analytic and counter-measured points of one kernel share a link id: join them.
    linked = flops_points.dropna(subset=["link"])
    for _, group in linked.groupby("link"):
        if len(group) > 1:
            ax.plot(group["ai_flop_per_byte"], group["achieved_tflops"], ":", color="grey", linewidth=1)
    for _, point in byte_only.iterrows():
        if isinstance(point["achieved_gbps"], float) and math.isfinite(point["achieved_gbps"]):
            colour = colours.get(point["family"], "black")
            key_lines.append(
                (f"  - {point['label']}: {point['achieved_gbps']:.0f} GB/s (no FLOPs: not on the plot)", colour)
            )
    per_column = math.ceil(len(key_lines) / key_columns) if key_lines else 1
    for index, (text, colour) in enumerate(key_lines):
        column, line = divmod(index, per_column)
        key_ax.text(
            column / key_columns,
            1 - line / max(per_column, 1),
            text,
            transform=key_ax.transAxes,
            fontsize=6.5,
            family="monospace",
            color=colour,
            va="top",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_low, x_high)
    top = max([c["achieved_tflops"] for c in ceiling_rows] + [1.0])
    bottom = min([x_low * spec.bandwidth_gbps / 1e3 / 2] + list(flops_points["achieved_tflops"].astype(float) / 2))
    ax.set_ylim(max(bottom, 1e-4), top * 2)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of HBM traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    out_base = Path(out_base)
    out_base.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for suffix in (".png", ".svg"):
        fig.savefig(out_base.with_suffix(suffix))
        written.append(out_base.with_suffix(suffix))
    plt.close(fig)
    data = pd.concat([points, pd.DataFrame(ceiling_rows)], ignore_index=True)
    data.to_csv(out_base.with_suffix(".csv"), index=False)
    written.append(out_base.with_suffix(".csv"))
    return written


def points_from_results(frame: pd.DataFrame) -> pd.DataFrame:
    """Plottable points from result rows: only rows that passed the correctness gate.

    Labels name the family, variant and dtype, plus only the shape parameters that differ between
    the family's rows (causal=1, op=append), so a label stays short enough to read.
    """
    ok = frame[frame["status"] == "ok"].reset_index(drop=True)
    ok["label"] = ok["family"] + "/" + ok["variant"] + " " + ok["dtype"]
    for _family, rows in ok.groupby("family"):
        shapes = [dict(item.split("=", 1) for item in str(shape).split(",") if "=" in item) for shape in rows["shape"]]
        varying = [key for key in shapes[0] if len({s.get(key) for s in shapes}) > 1]
        if varying:
            suffix = [" [" + ",".join(f"{k}={s.get(k)}" for k in varying) + "]" for s in shapes]
            ok.loc[rows.index, "label"] = ok.loc[rows.index, "label"] + suffix
    ok["point_kind"] = "measured"
    ok["link"] = None
    return ok.reindex(columns=POINT_COLUMNS)
