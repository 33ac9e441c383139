"""`rooflint profile FAMILY`: kernels per variant (proof of fusion) and, with --ncu, counter-measured bytes."""

from __future__ import annotations

import csv
import dataclasses
import gc
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rooflint.cli.console import console, err_console, user_errors
from rooflint.core.errors import UserError
from rooflint.core.paths import output_dir


def _fmt(value: float, digits: int = 3) -> str:
    return f"{value:.{digits}g}" if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def _write_csv(path: Path, records: list[dict]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)


@user_errors
def profile_command(
    family: Annotated[str, typer.Argument(help="The family to profile, e.g. gelu.")],
    variant: Annotated[
        list[str] | None, typer.Option("--variant", "-V", help="Variant names or kinds (repeat); default all.")
    ] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="fp32, fp16 or bf16.")] = "bf16",
    size: Annotated[str, typer.Option("--size", help="small, large, or key=value,... (first shape of a preset).")] = (
        "small"
    ),
    device: Annotated[str | None, typer.Option("--device", help="cuda or cpu (default: cuda if present).")] = None,
    ncu: Annotated[bool, typer.Option("--ncu", help="Also collect DRAM/L2 bytes and FLOPs with Nsight Compute.")] = (
        False
    ),
    out: Annotated[Path, typer.Option("--out", help="Directory for kernels.csv, ncu.csv and the ncu roofline.")] = Path(
        "rooflint-out/profile"
    ),
) -> None:
    """List the kernels each variant launches and each one's share of device time; with --ncu, measure its traffic.

    Examples:
      rooflint profile gelu --size large
      rooflint profile softmax -V eager_unfused -V triton --size large --ncu --out reports/ncu
    """
    from rooflint.core.registry import get_family
    from rooflint.engine import profile as engine
    from rooflint.engine.bench import resolve_device

    fam = get_family(family)
    device_name = resolve_device(device)
    if ncu and device_name != "cuda":
        raise UserError("--ncu needs a CUDA GPU; drop --ncu to list kernels on the CPU")
    variants = engine._runnable(fam, variant, device_name)
    if not variants:
        raise UserError(f"no variant of {family} can run on {device_name}")
    output_dir(out)
    shares = []
    for v in variants:
        _, fn = engine.build(fam, v, size, dtype, device_name)
        shares += engine.kernel_shares(fn, device_name, v.name)
        del fn
        gc.collect()
    table = Table(title=f"{family} {dtype} {size}: kernels per call on {device_name}")
    for column in ("variant", "kernel", "launches/call", "us/call", "share %"):
        table.add_column(column, overflow="fold")
    for s in shares:
        table.add_row(s.variant, s.kernel[:90], _fmt(s.calls_per_call), _fmt(s.device_us_per_call), _fmt(s.share_pct))
    console.print(table)
    _write_csv(out / "kernels.csv", [dataclasses.asdict(s) for s in shares])
    if not ncu:
        console.print(f"wrote {out / 'kernels.csv'}")
        return
    _ncu(fam, variants, dtype, size, out)


def _ncu(fam, variants, dtype: str, size: str, out: Path) -> None:
    import torch

    from rooflint.analysis import ncu as ncu_tools
    from rooflint.core.specs import current_gpu_spec
    from rooflint.engine import profile as engine
    from rooflint.engine import timing

    spec = current_gpu_spec()
    metrics = ncu_tools.BASE_METRICS + ncu_tools.tensor_metrics(engine.available_metrics())
    rows = []
    for v in variants:
        _, fn = engine.build(fam, v, size, dtype, "cuda")
        time_ms = timing.time_cuda(fn, l2_bytes=spec.l2_bytes).median_ms  # ncu's replays distort time
        del fn
        gc.collect()
        torch.cuda.empty_cache()  # the ncu child needs the memory
        try:
            counters = engine.run_ncu(fam, v, dtype, size, out, metrics)
        except RuntimeError as error:
            err_console.print(f"[yellow]skipped[/] {v.name}: {error}")
            continue
        rows.append(engine.ncu_row(fam, v, dtype, size, counters, time_ms))
    if not rows:
        raise typer.Exit(1)
    records = [dataclasses.asdict(r) for r in rows]
    _write_csv(out / "ncu.csv", records)
    table = Table(title=f"{fam.name} {dtype} {size}: analytic vs ncu-measured")
    for column in (
        "variant",
        "kernels",
        "ms",
        "model MiB",
        "DRAM MiB",
        "ratio",
        "L2 MiB",
        "AI model",
        "AI ncu",
        "notes",
    ):
        table.add_column(column, overflow="fold")
    for r in rows:
        model = r.modeled_bytes if math.isfinite(r.modeled_bytes) else r.ideal_bytes
        table.add_row(
            r.variant,
            str(r.kernels),
            _fmt(r.time_ms),
            _fmt(model / 2**20),
            _fmt(r.measured_dram_bytes / 2**20),
            _fmt(r.bytes_ratio),
            _fmt(r.measured_l2_bytes / 2**20),
            _fmt(r.analytic_ai),
            _fmt(r.measured_ai),
            r.notes,
        )
    console.print(table)
    from rooflint.core.roofs import measured_overlay

    written = engine.plot_ncu(rows, spec, out / "roofline_ncu", measured_overlay(spec))
    console.print(f"wrote {out / 'ncu.csv'}, " + ", ".join(str(p) for p in written))


def register(app: typer.Typer) -> None:
    app.command("profile")(profile_command)
