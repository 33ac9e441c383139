"""`rooflint specs`: GPU specifications with the source of every number."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from rooflint.cli.console import console, user_errors
from rooflint.cli.options import SpecFileOption


@user_errors
def specs_command(
    gpu: Annotated[str | None, typer.Argument(help="GPU key or name; all GPUs when omitted.")] = None,
    spec_file: SpecFileOption = None,
) -> None:
    """Show GPU specifications with the source of every number.

    Examples:
      rooflint specs
      rooflint specs h100
      rooflint specs mygpu --spec-file mygpu.toml
    """
    from rich.table import Table

    from rooflint.core.specs import all_specs, get_spec

    # An empty name (an unset shell variable) is an unknown GPU, not a request for every GPU.
    specs = [get_spec(gpu, spec_file)] if gpu is not None else list(all_specs(spec_file).values())
    if gpu is not None:
        spec = specs[0]
        # Names, sources and notes (a spec file's own text) are escaped, as is the title's [key]: rich
        # took "[h100_sxm]" for a style and dropped it, and a "[/x]" in a spec file raised (a traceback).
        table = Table(title=escape(f"{spec.name} [{spec.key}] ({spec.origin})"))
        for column in ("field", "value", "source"):
            table.add_column(column, overflow="fold")
        for name, item in spec.values.items():
            flag = " (halved from a with-sparsity figure)" if item.halved_from_sparse else ""
            source = item.source + (f" — {item.note}" if item.note else "")
            table.add_row(name, f"{item.value:g}{flag}", escape(source))
        console.print(table)
        return
    table = Table(title="GPU specifications (dense peaks; * = halved from a with-sparsity datasheet figure)")
    for column in (
        "key",
        "name",
        "GB/s",
        "tensor bf16",
        "tensor fp16",
        "tensor tf32",
        "tensor fp8",
        "fp32",
        "L2 MiB",
        "SMs",
    ):
        table.add_column(column)
    for spec in specs:

        def cell(field: str, spec=spec) -> str:
            item = spec.values.get(field)
            return "-" if item is None else f"{item.value:g}{'*' if item.halved_from_sparse else ''}"

        table.add_row(
            escape(spec.key),
            escape(spec.name),
            cell("memory_bandwidth_gbps"),
            cell("tensor_bf16_tflops"),
            cell("tensor_fp16_tflops"),
            cell("tensor_tf32_tflops"),
            cell("tensor_fp8_tflops"),
            cell("cuda_fp32_tflops"),
            cell("l2_mib"),
            cell("sm_count"),
        )
    console.print(table)
