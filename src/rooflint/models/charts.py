"""A model's roofline: one point per op, its area proportional to the op's share of the step.

outputs.plot draws kernels as equal markers; here size carries the message (the op that takes half
the step is the one to look at), so the plot is drawn directly. One image per kernel set and phase,
prefill and decode apart (their ops sit at intensities orders of magnitude apart), each with a CSV
of its points beside it.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: CI and GPU boxes have no display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from rooflint.core.roofline import analyse  # noqa: E402
from rooflint.models.rows import unit_cost  # noqa: E402
from rooflint.outputs.plot import beside, save_palette_png  # noqa: E402

MAX_AREA = 4000.0  # points^2 of an op that took the whole step


def plot_phases(outcome) -> list[Path]:
    written = []
    for result in outcome.sets:
        for phase in result.phases.values():
            if phase.attribution is not None:
                base = Path(outcome.request.out) / f"roofline-{outcome.loaded_name}-{result.name}-{phase.phase.name}"
                written += plot_ops(outcome, result.name, phase, base)
    return written


def points(outcome, phase) -> pd.DataFrame:
    dtype = outcome.request.dtype
    total = phase.attribution.total_ms
    records = []
    for op, cost in phase.costs.items():
        timed = phase.attribution.ops.get(op)
        if timed is None or timed.ms <= 0:
            continue
        point = analyse(unit_cost(cost, dtype), timed.ms / 1e3, outcome.spec, dtype)
        records.append(
            {
                "op": op,
                "ms": timed.ms,
                "share": timed.ms / total,
                "ai_flop_per_byte": point.ai_flop_per_byte,
                "achieved_tflops": point.achieved_tflops,
                "achieved_gbps": point.achieved_gbps,
                "pct_of_roof": point.pct_of_roof,
                "bound": point.bound,
            }
        )
    return pd.DataFrame(records)


def plot_ops(outcome, set_name: str, phase, out_base: Path) -> list[Path]:
    frame = points(outcome, phase)
    spec, dtype = outcome.spec, outcome.request.dtype
    fig, ax = plt.subplots(figsize=(13, 7), dpi=110)
    ais = [a for a in frame.get("ai_flop_per_byte", []) if a > 0 and math.isfinite(a)]
    x_low, x_high = min([0.05, *(a / 4 for a in ais)]), max([4096.0, *(a * 4 for a in ais)])
    bandwidth = spec.bandwidth_gbps / 1e3  # TB/s: TFLOP/s per FLOP/byte
    roofs = [("CUDA cores fp32", spec.cuda_peak_tflops("fp32"))]
    if dtype != "fp32":
        roofs.append((f"tensor {dtype}", spec.tensor_peak_tflops(dtype)))
    for label, peak in roofs:
        if peak:
            ridge = peak / bandwidth
            ax.plot([x_low, ridge, x_high], [x_low * bandwidth, peak, peak], "-", linewidth=1.3, alpha=0.8,
                    label=f"roof: {label} {peak:.3g} TFLOP/s, {spec.bandwidth_gbps:.3g} GB/s")  # fmt: skip
    colours = plt.cm.tab10
    for number, (index, record) in enumerate(frame.iterrows(), start=1):
        if not (record["achieved_tflops"] > 0 and record["ai_flop_per_byte"] > 0):
            continue
        label = (
            f"{number} {record['op']}: {record['share']:.0%} of step, {record['ms']:.3g} ms, "
            f"{record['pct_of_roof']:.0f}% of roof"
        )
        ax.scatter(record["ai_flop_per_byte"], record["achieved_tflops"], s=max(MAX_AREA * record["share"], 12),
                   color=colours(index % 10), alpha=0.55, edgecolors="black", linewidths=0.6, zorder=3,
                   label=label)  # fmt: skip
        # Numbers, not names, beside the points: the GEMMs sit within a few percent of each other.
        ax.annotate(str(number), (record["ai_flop_per_byte"], record["achieved_tflops"]), textcoords="offset points",
                    xytext=(5, 4), fontsize=8)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_low, x_high)
    top = max([peak or 0 for _, peak in roofs] + [1.0])
    rates = [r for r in frame.get("achieved_tflops", []) if r > 0]
    ax.set_ylim(max(min([x_low * bandwidth / 2, *(r / 3 for r in rates)]), 1e-6), top * 2)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of HBM traffic, ideal)")
    ax.set_ylabel("TFLOP/s")
    p = phase.phase
    ax.set_title(
        f"{outcome.family} {set_name} {p.name}: B={p.batch}, T={p.tokens}, context {p.context}, {dtype}\n"
        f"area = share of the step ({phase.attribution.total_ms:.3g} ms of ops profiled, "
        f"{phase.timing.median_ms:.3g} ms timed)",
        fontsize=10,
    )
    ax.grid(True, which="major", alpha=0.3)
    legend = ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    for handle in legend.legend_handles:
        if hasattr(handle, "set_sizes"):
            handle.set_sizes([40])  # the key shows colours; areas are on the plot
    # Fixed margins, the key to the right: tight_layout measures every log tick label and costs seconds.
    fig.subplots_adjust(left=0.07, right=0.66, top=0.9, bottom=0.09)
    out_base.parent.mkdir(parents=True, exist_ok=True)
    png, csv = beside(out_base, ".png"), beside(out_base, ".csv")
    save_palette_png(fig, png)
    plt.close(fig)
    frame.to_csv(csv, index=False)
    return [png, csv]


def plot_sweep(outcome) -> list[Path]:
    """Decode tok/s against batch, a line per kernel set and context, the floor dashed beside it:
    a filled marker where the floor is memory-bound, a square where compute binds, so the batch
    at which decode turns compute-bound is where the markers change. A CSV of the points beside it."""
    frame = pd.DataFrame([vars(point) for point in outcome.sweep if point.status == "ok"])
    base = Path(outcome.request.out) / f"sweep-{outcome.loaded_name}"
    fig, ax = plt.subplots(figsize=(11, 6.5), dpi=110)
    colours = plt.cm.tab10
    for number, ((kernels, context), group) in enumerate(frame.groupby(["kernels", "context"]) if len(frame) else []):
        group = group.sort_values("batch")
        colour = colours(number % 10)
        ax.plot(group["batch"], group["tokens_per_s"], "-", color=colour, label=f"{kernels}, context {context}")
        floor_rate = group["batch"] / (group["floor_ms"] / 1e3)
        ax.plot(group["batch"], floor_rate, "--", color=colour, alpha=0.5, linewidth=1)
        for batch, rate, bound in zip(group["batch"], floor_rate, group["bound"]):
            ax.scatter(batch, rate, marker="s" if bound == "compute" else "o", color=colour, zorder=3,
                       facecolors="none" if bound == "compute" else colour)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (sequences per decode step)")
    ax.set_ylabel("decode tokens / s")
    ax.set_title(
        f"{outcome.family} decode sweep, {outcome.request.dtype}, on {outcome.spec.name}\n"
        "solid: measured; dashed: the floor (circles: memory binds, open squares: compute binds)",
        fontsize=10,
    )
    ax.grid(True, which="major", alpha=0.3)
    if len(frame):
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.subplots_adjust(left=0.08, right=0.72, top=0.88, bottom=0.1)
    base.parent.mkdir(parents=True, exist_ok=True)
    png, csv = beside(base, ".png"), beside(base, ".csv")
    save_palette_png(fig, png)
    plt.close(fig)
    frame.to_csv(csv, index=False)
    return [png, csv]
