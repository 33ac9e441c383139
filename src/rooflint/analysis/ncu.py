"""Nsight Compute: the command that profiles one variant's NVTX range, and the parser of its CSV.

ncu counts what the hardware did: DRAM bytes at the memory controllers, L2 (lts) bytes, and the
floating-point instructions the SMs executed. They are the second witness beside the analytic
cost model. ncu replays each kernel once per counter pass and, by default, flushes the caches
before each pass (--cache-control all), so DRAM bytes are those of a cold call, like bench's.
"""

from __future__ import annotations

import csv
import io
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from rooflint.core.errors import UserError

DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
L2_BYTES = "lts__t_bytes.sum"
# Bytes the SMs received from the L2 through the crossbar. Beside L2_BYTES it says whether the L2
# served reads of the same lines by several SMs once (FlashAttention-4's K/V reads) or once for each
# SM (docs/profile.md, "L2 / SM byte").
SM_FROM_L2 = "l1tex__m_xbar2l1tex_read_bytes.sum"
# Per-thread SASS instruction counts; an FMA is two FLOPs. Half-precision instructions are counted
# per thread instruction as ncu's own roofline does: a packed HFMA2 does twice the work, so fp16
# FLOPs from these counters are a lower bound when the compiler packs pairs.
SASS_FP32 = {"fadd": 1, "fmul": 1, "ffma": 2}
SASS_FP16 = {"hadd": 1, "hmul": 1, "hfma": 2}
SASS_METRICS = [f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in (*SASS_FP32, *SASS_FP16)]
BASE_METRICS = [DRAM_READ, DRAM_WRITE, L2_BYTES, *SASS_METRICS, "gpu__time_duration.sum"]
# Tensor-core work: sm__ops_path_tensor_src_<type> counts the tensor path's math ops by source
# type, one FMA counting 2, so it is FLOPs: a 4096^3 bf16 torch.mm on the H100 read exactly
# 2 * 4096^3 (tests/data/ncu_h100_calib.csv). The per-instruction (op_hgmma_..., op_hmma_...) and
# _sparsity_on/_off counters split the same ops again; summing them too would double count.
TENSOR_PREFIX = "sm__ops_path_tensor_src_"
TENSOR_FLOAT_SOURCES = ("fp64", "tf32", "fp16", "bf16", "fp8")


def is_tensor_flop_metric(name: str) -> bool:
    """A by-source tensor counter of floating-point work (integer MMA is not FLOPs)."""
    base = name.removesuffix(".sum")
    if not base.startswith(TENSOR_PREFIX) or "sparsity" in base or "." in base:
        return False
    return base[len(TENSOR_PREFIX) :].split("_")[0] in TENSOR_FLOAT_SOURCES


def ncu_path() -> str | None:
    return shutil.which("ncu")


def nvtx_filter(family: str, variant: str, dtype: str, size: str) -> str:
    """ncu's filter for push/pop ranges nested family > variant > dtype > size (trailing / = push/pop)."""
    return f"{family}/{variant}/{dtype}/{size}/"


def parse_query_metrics(text: str) -> list[str]:
    """Metric base names from `ncu --query-metrics` output (the first word of each metric line)."""
    names = []
    for line in text.splitlines():
        word = line.split(" ", 1)[0].strip()
        if "__" in word and word.replace("_", "").replace(".", "").isalnum():
            names.append(word)
    return names


def delivery_metrics(available: list[str]) -> list[str]:
    """SM_FROM_L2 where this ncu offers it for this GPU."""
    return [SM_FROM_L2] if SM_FROM_L2.removesuffix(".sum") in set(available) else []


def tensor_metrics(available: list[str]) -> list[str]:
    """The tensor FLOP counters this ncu offers for this GPU (the set differs per architecture)."""
    return sorted({f"{name}.sum" for name in available if is_tensor_flop_metric(name)})


def profile_command(
    ncu: str, report: Path, filt: str, metrics: list[str], program: list[str], sections: tuple[str, ...] = ()
) -> list[str]:
    """``sections``: ncu sections collected beside the metrics (SourceCounters for the SASS view)."""
    return [
        ncu,
        "--nvtx",
        "--nvtx-include",
        filt,
        "--metrics",
        ",".join(metrics),
        *(arg for section in sections for arg in ("--section", section)),
        "--target-processes",
        "all",
        # ncu's default (--clock-control base) locks the GPU's clocks at base for the session. That
        # is a setting of a GPU that may be shared, which rooflint never changes; the counters we
        # read (bytes, FLOPs) do not depend on the clock, and the times stay the GPU's own.
        "--clock-control",
        "none",
        "--export",
        str(report),
        "--force-overwrite",
        *program,
    ]


def import_command(ncu: str, report: Path) -> list[str]:
    """One row per kernel, one column per metric, values in base units (bytes, not Mbyte)."""
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]


def source_import_command(ncu: str, report: Path) -> list[str]:
    """Each kernel's SASS, one row per instruction: its executions and its warps' stall samples
    (analysis/sass.py reads it)."""
    return [ncu, "--import", str(report), "--csv", "--page", "source", "--print-source", "sass"]


def parse_number(text: str) -> float:
    """A number as ncu's CSV export writes it (thousands separators; n/a or - for none: NaN)."""
    cleaned = text.strip().replace(",", "")
    if cleaned in ("", "n/a", "N/A", "-"):
        return math.nan
    try:
        return float(cleaned)
    except ValueError:
        return math.nan


@dataclass
class KernelCounters:
    name: str
    values: dict[str, float] = field(default_factory=dict)


def parse_raw_csv(text: str) -> list[KernelCounters]:
    """Parse `ncu --import R --csv --page raw --print-units base`.

    Layout: a header row of column names ("ID", "Kernel Name", ..., metric names), a row of units,
    then one row per profiled kernel. Lines before the header (==PROF== messages) are skipped.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise UserError("ncu output has no CSV header (no kernel matched the NVTX filter, or ncu failed)")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    if "Kernel Name" not in header:
        raise UserError("ncu CSV has no 'Kernel Name' column; was it written with --page raw?")
    body = rows[1:]
    if body and body[0] and body[0][0].strip() == "":
        body = body[1:]  # the units row: first cell (ID) empty
    name_at = header.index("Kernel Name")
    kernels = []
    for row in body:
        if len(row) != len(header):
            continue
        values = {column: parse_number(cell) for column, cell in zip(header, row) if "__" in column}
        kernels.append(KernelCounters(row[name_at], values))
    return kernels


@dataclass
class Measured:
    kernels: int
    dram_read_bytes: float
    dram_write_bytes: float
    l2_bytes: float
    cuda_flops: float
    fp16_flops: float
    tensor_ops: float
    duration_ms: float
    notes: list[str]
    sm_from_l2_bytes: float = math.nan  # SM_FROM_L2

    @property
    def dram_bytes(self) -> float:
        return self.dram_read_bytes + self.dram_write_bytes


def _sum(kernels: list[KernelCounters], metric: str) -> float:
    values = [k.values.get(metric, math.nan) for k in kernels]
    known = [v for v in values if math.isfinite(v)]
    return sum(known) if known else math.nan


def aggregate(kernels: list[KernelCounters], calls: int = 1) -> Measured:
    """Totals over every kernel in the range, divided by the calls the range held."""
    notes = []
    per = lambda metric: _sum(kernels, metric) / calls
    fp32 = sum(w * per(f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum") for op, w in SASS_FP32.items())
    fp16 = sum(w * per(f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum") for op, w in SASS_FP16.items())
    tensor_columns = sorted({m for k in kernels for m in k.values if m.endswith(".sum") and is_tensor_flop_metric(m)})
    tensor = sum(per(m) for m in tensor_columns) if tensor_columns else math.nan
    if not tensor_columns:
        notes.append("no sm__ops_path_tensor_src counters collected")
    duration = per("gpu__time_duration.sum")
    return Measured(
        kernels=len(kernels) // max(calls, 1),
        dram_read_bytes=per(DRAM_READ),
        dram_write_bytes=per(DRAM_WRITE),
        l2_bytes=per(L2_BYTES),
        cuda_flops=fp32 + fp16,
        fp16_flops=fp16,
        tensor_ops=tensor,
        duration_ms=duration / 1e6 if math.isfinite(duration) else math.nan,  # ns in base units
        notes=notes,
        sm_from_l2_bytes=per(SM_FROM_L2),
    )


def read_raw_csv(path: Path | str) -> list[KernelCounters]:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"ncu CSV {path} does not exist")
    return parse_raw_csv(path.read_text(errors="replace"))
