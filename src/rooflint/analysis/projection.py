"""Cross-GPU projection: what rows measured on GPU Y predict for GPU X.

The model, per ok row:

- floor on X: the roofline floor of the row's analytic cost (tensor FLOPs, CUDA-core FLOPs, ideal
  HBM bytes) under X's ceilings, max(bytes / bandwidth, FLOPs / peak), exactly as rooflint.core.roofline
  computes it for a measured row. No implementation can beat it on X.
- projected time on X: floor on X / (measured % of roof on Y / 100). The assumption is that a
  kernel keeps the fraction of its roof that it reached on Y: a copy at 90% of Y's bandwidth runs
  at 90% of X's. That holds while the same limit binds on both GPUs and the kernel's inefficiency
  (launch shape, occupancy, tail effects) scales with the hardware; it breaks where the bound flips
  (a kernel memory bound on Y and compute bound on X) or where a kernel tuned for Y's SM count or
  shared memory no longer fits X. Rows measured on a CPU carry no GPU efficiency, so for them only
  the floor is projected.

The predicted point sits at the row's arithmetic intensity (which the hardware does not change)
and at the projected FLOP/s and GB/s; point_kind is "predicted" so plots and CSVs keep it apart
from measured points.
"""

from __future__ import annotations

import math

import pandas as pd

from rooflint.core.fmt import number, text
from rooflint.core.roofline import floor_seconds
from rooflint.core.specs import GpuSpec, unit_precisions
from rooflint.outputs.results import OK

MEASURED, PREDICTED = "measured", "predicted"
KEEP_FRACTION, FLOOR_ONLY = "kept measured fraction of roof", "roofline floor"

PROJECTION_COLUMNS = [
    "label",
    "family",
    "variant",
    "kind",
    "dtype",
    "size",
    "shape",
    "gpu",  # the target X
    "source_gpu",  # Y, where the row was measured
    "point_kind",  # always "predicted"
    "model",  # KEEP_FRACTION or FLOOR_ONLY
    "source_median_ms",
    "source_pct_of_roof",
    "floor_ms",  # the pure roofline floor on X
    "predicted_ms",  # floor_ms / fraction of roof kept (floor_ms under FLOOR_ONLY)
    "ai_flop_per_byte",
    "achieved_tflops",  # at predicted_ms
    "achieved_gbps",  # at predicted_ms
    "attainable_tflops",  # at floor_ms
    "bound",  # which limit sets X's floor
    "note",
    "link",  # rooflint.outputs.plot joins points sharing a link; projections share none
]


def project(frame: pd.DataFrame, target: GpuSpec) -> pd.DataFrame:
    """Predict each measured row's time on the `target` GPU; returns one predicted point per row.

    `frame` is a results table (rooflint.outputs.results.read_results). Rows that are not ok, or that were
    measured on the target itself (their gpu equals target.key), are left out: the first have no
    time to scale and the second need no prediction. Each returned row has the columns of
    PROJECTION_COLUMNS: floor_ms is the pure roofline floor on the target, predicted_ms assumes the
    kernel keeps the % of roof it measured (the floor alone for CPU-measured rows, model says which),
    achieved_tflops / achieved_gbps are at predicted_ms, ai_flop_per_byte is unchanged, and
    point_kind is "predicted". A row whose cost needs a peak the target lacks (say bf16 tensor cores
    on a T4) gets NaN times and a note saying why.
    """
    from rooflint.core.family import Cost  # torch, which drawing measured points does not need

    out = []
    for record in frame.to_dict("records"):
        if record.get("status") != OK or str(record.get("gpu", "")) == target.key:
            continue
        tensor_flops = number(record.get("tensor_flops"))
        cuda_flops = number(record.get("cuda_flops"))
        ideal_bytes = number(record.get("ideal_bytes"))
        cost = Cost(
            tensor_flops=0.0 if math.isnan(tensor_flops) else tensor_flops,
            cuda_flops=0.0 if math.isnan(cuda_flops) else cuda_flops,
            bytes=0.0 if math.isnan(ideal_bytes) else ideal_bytes,
        )
        precision = unit_precisions(
            text(record.get("compute_unit")), text(record.get("precision")), text(record.get("dtype"))
        )[0]
        floor_s, bound = floor_seconds(cost, target, precision)
        note = ""
        if math.isnan(floor_s):
            note = f"{target.key} has no {precision} tensor-core peak in its spec"
        source_gpu = str(record.get("gpu", ""))
        pct = number(record.get("pct_of_roof"))
        if source_gpu != "cpu" and math.isfinite(pct) and pct > 0:
            model, predicted_s = KEEP_FRACTION, floor_s / (pct / 100.0)
        else:
            model, predicted_s = FLOOR_ONLY, floor_s
            if not note and source_gpu != "cpu":
                note = "no measured % of roof on the source GPU; floor only"
        valid = math.isfinite(predicted_s) and predicted_s > 0
        out.append(
            {
                "label": f"{record['family']}/{record['variant']} {record.get('dtype', '')} from {source_gpu or '?'}",
                "family": record["family"],
                "variant": record["variant"],
                "kind": record.get("kind", ""),
                "dtype": record.get("dtype", ""),
                "size": record.get("size", ""),
                "shape": record.get("shape", ""),
                "gpu": target.key,
                "source_gpu": source_gpu,
                "point_kind": PREDICTED,
                "model": model,
                "source_median_ms": number(record.get("median_ms")),
                "source_pct_of_roof": pct,
                "floor_ms": floor_s * 1e3,
                "predicted_ms": predicted_s * 1e3,
                "ai_flop_per_byte": cost.flops / cost.bytes if cost.bytes else math.nan,
                "achieved_tflops": cost.flops / predicted_s / 1e12 if valid and cost.flops else math.nan,
                "achieved_gbps": cost.bytes / predicted_s / 1e9 if valid else math.nan,
                "attainable_tflops": cost.flops / floor_s / 1e12 if floor_s > 0 and cost.flops else math.nan,
                "bound": bound,
                "note": note,
                "link": None,
            }
        )
    return pd.DataFrame(out, columns=PROJECTION_COLUMNS)


def predicted_points(spec: GpuSpec, spec_dtype: str = "bf16") -> pd.DataFrame:
    """Each family's attainable point on ``spec`` from its cost model at the large size. A family
    none of whose dtypes has a roof on ``spec`` (a spec file without the peak it needs) has no point:
    its name is in the frame's ``attrs["not_predicted"]``, for the caller to say so."""
    from rooflint.core.registry import family_names, get_family

    records, not_predicted = [], []
    dtype = spec_dtype if spec.tensor_peak_tflops(spec_dtype) else "fp16"
    for name in family_names():
        family = get_family(name)
        for _preset, params in family.cases("large"):
            # The asked dtype where the family has it, else the family's first dtype that this GPU
            # has a roof for (a T4 has no fp8 tensor cores: an fp8 family is predicted in int8 there).
            for use in dict.fromkeys((dtype, *family.dtypes) if dtype in family.dtypes else family.dtypes):
                cost = family.cost(params, use)
                floor, bound = floor_seconds(cost, spec, family.tensor_precision(use))
                if math.isfinite(floor) and floor > 0:
                    break
            else:
                if name not in not_predicted:
                    not_predicted.append(name)
                continue
            records.append(
                {
                    "label": f"{name} {use} [{','.join(f'{k}={v}' for k, v in params.items())}]",
                    "family": name,
                    "variant": "roofline",
                    "kind": "",
                    "dtype": use,
                    "ai_flop_per_byte": cost.intensity if cost.bytes else math.nan,
                    "achieved_tflops": cost.flops / floor / 1e12,
                    "achieved_gbps": cost.bytes / floor / 1e9,
                    "point_kind": "predicted",
                    "link": None,
                }
            )
    frame = pd.DataFrame(records)
    frame.attrs["not_predicted"] = not_predicted
    return frame


def measured_groups(frame: pd.DataFrame, spec_file=None) -> list[tuple[GpuSpec, pd.DataFrame]]:
    """Each GPU a results frame was measured on, in the file's order, with its spec as its rows were
    judged (spec_from_rows) and those rows: what `rooflint roofline RESULTS` draws without --gpu.
    Empty when no row recorded a ceiling (nothing was timed)."""
    from rooflint.core.specs import spec_from_rows

    gpus = frame["gpu"].fillna("").astype(str)
    groups = (
        (spec_from_rows(gpu, rows.to_dict("records"), spec_file), rows) for gpu, rows in frame.groupby(gpus, sort=False)
    )
    return [(spec, rows) for spec, rows in groups if spec is not None]


def points_for_roofline(spec: GpuSpec, frame: pd.DataFrame | None = None) -> tuple[pd.DataFrame, str]:
    """The points `rooflint roofline` draws on ``spec``, and the plot's title.

    Rows measured on that GPU are plotted as measured; rows from other GPUs are projected onto it;
    with no results, each family's attainable point is predicted from its cost model.
    """
    from rooflint.outputs.points import points_from_results

    if frame is None:
        return predicted_points(spec), f"{spec.name}: predicted attainable points from rooflint's cost models"
    here = frame[frame["gpu"] == spec.key]
    if len(here):
        return points_from_results(here), f"{spec.name}: measured"
    gpus = ", ".join(sorted(set(frame["gpu"].astype(str))))
    return project(frame, spec), f"{spec.name}: projected from results measured on {gpus}"
