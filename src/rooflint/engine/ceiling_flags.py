"""The `rooflint ceilings` flags judged before anything is measured, importable without torch:
the command checks them before it imports the measuring code (engine/ceilings.py), so a bad flag on
the CPU is answered at once rather than after torch's import (seconds)."""

from __future__ import annotations

from pathlib import Path

from rooflint.core.errors import UserError
from rooflint.core.paths import probe_output_dir
from rooflint.core.roofs import cache_dir
from rooflint.core.specs import check_gpu_flag, load_spec_file
from rooflint.engine.device import resolve_device

CPU_KEY = "cpu"  # the stored file of a CPU's ceilings: cpu.toml


def check_flags(
    device: str | None, out: Path | None, spec_file: Path | str | None, gpu: str | None
) -> tuple[bool, Path]:
    """(on the CPU, the folder the ceilings go to), every flag checked before a minute of measuring: a
    missing or malformed spec file (which a CPU run never reads) refused, not ignored, and an --out
    that cannot be written refused, not found after."""
    on_cpu = resolve_device(device) == "cpu"
    if spec_file:
        load_spec_file(spec_file)
    check_gpu_flag(gpu or None, spec_file, on_cpu)
    directory = Path(out) if out else cache_dir()
    probe_output_dir(directory)
    return on_cpu, directory


def refuse_folder_over(directory: Path, key: str) -> None:
    """A folder where <key>.toml goes cannot be replaced: refused now, not after the measuring."""
    if (directory / f"{key}.toml").is_dir():
        raise UserError(
            f"cannot write ceilings {directory / f'{key}.toml'}: it is a directory; move it away or give another --out"
        )
