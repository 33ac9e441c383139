"""The `rooflint profile` flags judged without the family module or torch: --sass, --ncu, the spec
file and --gpu.

`rooflint profile` checks them before it imports the profiling code, so a bad flag is answered at
once instead of after torch's import (seconds); run_profile checks them too, in the same place of
its order, so a profile started through the Python API is judged the same way.
"""

from __future__ import annotations

from pathlib import Path

from rooflint.analysis import ncu as ncu_tools
from rooflint.core.errors import UserError
from rooflint.core.specs import check_gpu_flag, load_spec_file

NO_NCU = "--ncu needs Nsight Compute's `ncu` on PATH (it ships with the CUDA toolkit); drop --ncu to list kernels only"


def check_flags(device: str | None, ncu: bool, sass: bool, spec_file: Path | str | None, gpu: str | None) -> None:
    """``device`` as resolve_device gave it, or None where it is not known yet (left out: whether a GPU
    is visible is asked of torch): then only the flags that do not depend on it are judged."""
    if sass and not ncu:
        raise UserError("--sass reads Nsight Compute's source page: add --ncu")
    if device is None:
        return
    if ncu and device != "cuda":
        raise UserError("--ncu needs a CUDA GPU; drop --ncu to list kernels on the CPU")
    if ncu and ncu_tools.ncu_path() is None:
        # Found only when the first variant went under ncu: after every variant was built, checked,
        # profiled and timed, and with the kernel table they gave never printed.
        raise UserError(NO_NCU)
    if spec_file:
        load_spec_file(spec_file)  # missing, binary or not TOML: refused, not ignored without --ncu
    check_gpu_flag(gpu, spec_file, on_cpu=device != "cuda")  # with or without --ncu
