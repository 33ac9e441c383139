"""The points a roofline draws and how they look, without matplotlib: the interactive report,
the Markdown report and projections use these too, and must not pay for importing a plotting
library (rooflint.outputs.plot draws them)."""

from __future__ import annotations

import re

import pandas as pd

from rooflint.core.gpu_spec import tensor_precision_of
from rooflint.core.roofline import CUDA_CORE_PRECISION
from rooflint.core.specs import TENSOR_PRECISIONS, GpuSpec

KIND_MARKERS = {"eager": "s", "eager_unfused": "v", "compile": "D", "triton": "o", "cuda": "^", "library": "*"}
# Families by colour: tab10, then the dark shades of tab20b (dark enough for text on white), so a
# dozen families stay apart. The interactive report uses the same mapping.
FAMILY_PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
    "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173",
)  # fmt: skip


def family_colours(families) -> dict[str, str]:
    """Colour per family, by sorted name, so the same families get the same colours in every plot."""
    return {family: FAMILY_PALETTE[i % len(FAMILY_PALETTE)] for i, family in enumerate(sorted(set(families)))}


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
    # Dtype names stand for the precision their MMAs run: fp8_e4m3 rows draw the fp8 roof.
    wanted = {tensor_precision_of(p) for p in precisions} if precisions else {"bf16", "fp16"}
    drawn = set()
    for precision in TENSOR_PRECISIONS:
        peak = spec.tensor_peak_tflops(precision)
        if peak and precision in wanted and peak not in drawn:
            same = [p for p in TENSOR_PRECISIONS if spec.tensor_peak_tflops(p) == peak and p in wanted]
            roofs.append((f"{'CPU matmul' if spec.key == 'cpu' else 'tensor'} {'/'.join(same)}", peak))
            drawn.add(peak)
    return roofs


def shape_tag(label) -> str:
    """The shape parameters a label carries ("[op=append]"), or ""."""
    found = re.search(r"\[[^\]]*\]", str(label))
    return found.group(0) if found else ""


def points_from_results(frame: pd.DataFrame) -> pd.DataFrame:
    """Plottable points from result rows: only rows that passed the correctness gate.

    Labels name the family, variant and dtype, plus only the shape parameters that differ between
    the family's rows (causal=1, op=append), so a label stays short enough to read.
    """
    ok = frame[frame["status"] == "ok"].reset_index(drop=True)
    ok["label"] = ok["family"] + "/" + ok["variant"] + " " + ok["dtype"]
    for _family, rows in ok.groupby("family"):
        shapes = [dict(item.split("=", 1) for item in str(shape).split(",") if "=" in item) for shape in rows["shape"]]
        # Every row's keys, not the first's: a model's decode rows have prompt and new where its
        # prefill rows have T, and its sweep points a context (labelled T=None, the points alike).
        keys = dict.fromkeys(key for shape in shapes for key in shape)
        varying = [key for key in keys if len({s.get(key) for s in shapes}) > 1]
        if varying:
            suffix = [" [" + ",".join(f"{k}={s[k]}" for k in varying if k in s) + "]" for s in shapes]
            ok.loc[rows.index, "label"] = ok.loc[rows.index, "label"] + suffix
        # A burst run merged with a sustained one holds each row twice: the regime tells them apart.
        regimes = rows["regime"].fillna("").astype(str) if "regime" in rows else None
        if regimes is not None and len(set(regimes) - {""}) > 1:
            ok.loc[rows.index, "label"] = ok.loc[rows.index, "label"] + [f" ({r})" if r else "" for r in regimes]
        # So does a `--cuda-graphs` run merged with an event-timed one: a graph replay's point beside
        # the event-timed call's, both labelled alike, read as one variant measured twice.
        graphed = rows["timing_mode"].fillna("").astype(str) == "cuda_graph" if "timing_mode" in rows else None
        if graphed is not None and graphed.nunique() > 1:
            ok.loc[rows.index, "label"] = ok.loc[rows.index, "label"] + [" (CUDA graphs)" if g else "" for g in graphed]
    ok["point_kind"] = "measured"
    ok["link"] = None
    return ok.reindex(columns=POINT_COLUMNS)
