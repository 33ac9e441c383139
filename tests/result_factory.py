"""Synthetic results for the report/compare/merge/projection tests.

Rows are ResultRow instances written by the real ResultWriter, and their roofline columns come from
rooflint.core.roofline.analyse, so the tests follow the schema and the maths wherever they change.
"""

from __future__ import annotations

import csv
from pathlib import Path

from rooflint.core.family import Cost
from rooflint.core.roofline import analyse, copy_to_row
from rooflint.core.specs import GpuSpec, get_spec, measured_spec
from rooflint.outputs.results import OK, ResultRow, ResultWriter

CPU = measured_spec("cpu", "CPU (measured)", 20.0, {"cuda_fp32_tflops": 0.5}, "measured at start")

N = 1 << 28  # vector_add's large shape
VECTOR_ADD_BF16 = Cost(cuda_flops=N, bytes=3 * N * 2)  # read a and b, write c; one add per element
ROWS, COLS = 4096, 8192
SOFTMAX_BF16 = Cost(cuda_flops=5 * ROWS * COLS, bytes=2 * ROWS * COLS * 2)  # read x, write y
MATMUL_BF16 = Cost(tensor_flops=2 * 4096**3, bytes=3 * 4096 * 4096 * 2)  # read A and B, write C


def row(
    family: str = "vector_add",
    variant: str = "triton",
    median_ms: float = 1.0,
    *,
    kind: str | None = None,
    dtype: str = "bf16",
    shape: str = f"n={N}",
    gpu: str = "h100_sxm",
    cost: Cost = VECTOR_ADD_BF16,
    spread: float = 0.01,
    status: str = OK,
    message: str = "",
    timestamp: str = "2026-11-20T10:00:00+00:00",
    lint: str = "",
    spec: GpuSpec | None = None,
    **columns,
) -> ResultRow:
    """One result; spread is the relative half-width of [p20, p80] around the median. `spec` gives
    the ceilings for a GPU outside the table (a CPU run's measured ones); `columns` sets any other
    ResultRow field (sm_clock_mhz=..., throttled=True, device_index=1), after the maths."""
    spec = spec or get_spec(gpu)
    result = ResultRow(
        family=family,
        variant=variant,
        kind=kind or variant,
        dtype=dtype,
        size="large",
        shape=shape,
        status=status,
        message=message,
        gpu=gpu,
        device_name=spec.name,
        timestamp=timestamp,
        tensor_flops=cost.tensor_flops,
        cuda_flops=cost.cuda_flops,
        ideal_bytes=cost.bytes,
        lint=lint,
        torch_version="2.11.0",
        git_commit="0123456789abcdef",
    )
    if status == OK:
        point = analyse(cost, median_ms / 1e3, spec, dtype)
        result.timing_mode, result.l2_flushed, result.n_samples = "cuda_events", True, 100
        result.median_ms, result.p20_ms = median_ms, median_ms * (1 - spread)
        result.p80_ms = median_ms * (1 + spread)
        copy_to_row(point, result)
        result.ceiling_source = "datasheet" if spec.origin == "datasheet" else "measured"
    for name, value in columns.items():
        if not hasattr(result, name):
            raise TypeError(f"ResultRow has no column {name!r}")
        setattr(result, name, value)
    return result


def write(rows: list[ResultRow], out_dir: Path) -> Path:
    """Write rows with rooflint's own writer; returns the results.csv path."""
    writer = ResultWriter(out_dir)
    for item in rows:
        writer.append(item)
    writer.close()
    return writer.csv_path


def run(gpu: str = "h100_sxm", scale: float = 1.0, spread: float = 0.01, slower_gpu: float = 1.0) -> list[ResultRow]:
    """A small run: vector_add and softmax, eager and triton. `scale` multiplies the triton times
    (a planted regression), `slower_gpu` every time (the same code on a slower GPU)."""
    s, g = spread, gpu
    softmax = {"cost": SOFTMAX_BF16, "shape": "M=4096,N=8192", "spread": s, "gpu": g}
    return [
        row("vector_add", "eager", 0.60 * slower_gpu, gpu=g, spread=s),
        row("vector_add", "triton", 0.55 * slower_gpu * scale, gpu=g, spread=s),
        row("softmax", "eager", 0.12 * slower_gpu, **softmax),
        row("softmax", "triton", 0.09 * slower_gpu * scale, **softmax),
    ]


def read_csv(path: Path) -> list[dict[str, str]]:
    """A CSV file's rows as written, each a dict of text cells (results, ab --csv, kernels.csv)."""
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def rewritten(results: Path, out: Path, change) -> Path:
    """results.csv with ``change(rows)`` applied to its rows as text cells, written with csv."""
    rows = read_csv(results)
    change(rows)
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out
