"""The `rooflint model` flags that can be judged without torch or transformers: the kernel set names,
the sizes, the dtype, and the flags that name a file, folder or GPU.

run_model judges a request with these (validate); the command calls them too before its heavy imports
where the model's preset is known without them, so a bad flag is answered at once, not after seconds
of importing torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rooflint.core.dtype_names import FLOAT_DTYPES
from rooflint.core.errors import UserError
from rooflint.core.paths import probe_output_dir
from rooflint.core.specs import check_gpu_flag, load_spec_file
from rooflint.engine.device import resolve_device
from rooflint.outputs.folder_lock import refuse_if_busy

KERNEL_SETS = ("eager", "triton", "cuda", "compile")  # run order: compile last, it compiles for minutes
# The library sets (models/library_sets.py: Liger-Kernel, FlashInfer, FlashAttention-4), Llama family
# only, run when asked for; ALL_SETS is every name --kernels takes, in run order.
LIBRARY_SETS = ("liger", "flashinfer", "fa4")
ALL_SETS = ("eager", "triton", "cuda", *LIBRARY_SETS, "compile")


def parse_sizes(text: str | None, option: str) -> list[int] | None:
    """``"1,8,32"`` -> [1, 8, 32]; one line naming the option when an entry is not a positive integer."""
    if text is None:
        return None
    values = []
    for item in str(text).split(","):
        try:
            value = int(item.strip())
        except ValueError:
            value = 0
        if value < 1:
            raise UserError(f"{option} takes positive integers separated by commas, like 1,8,32; got {text!r}")
        if value in values:  # the same point twice: two rows of one shape, the second a wasted measurement
            raise UserError(f"{option} {text!r} names {value} twice; give each value once")
        values.append(value)
    return values


def check_weights_flags(weights_dir: Path, layers: int | None) -> None:
    """--weights names a checkpoint folder, and a loaded checkpoint keeps its own depth."""
    if not Path(weights_dir).is_dir():
        raise UserError(f"--weights {weights_dir} is not a directory holding a saved checkpoint")
    if layers is not None:
        raise UserError("--layers overrides a preset's depth; it cannot shorten a loaded checkpoint (--weights)")


def validate(request: Any) -> list[str]:
    """A ModelRequest's (or the command's same fields') dtype, sizes, kernel sets and flags; the sets asked for."""
    if request.dtype not in FLOAT_DTYPES:  # a whole model runs in a float dtype; quantized ones are GEMM cases
        raise UserError(f"unknown dtype {request.dtype!r} for a model; valid: {', '.join(FLOAT_DTYPES)}")
    for name in ("batch", "seq", "prompt", "new_tokens"):
        if getattr(request, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if request.layers is not None and request.layers < 1:
        raise UserError("--layers must be at least 1")
    sets = request.kernels
    unknown = [k for k in sets or [] if k not in ALL_SETS]
    if unknown:
        raise UserError(f"unknown kernel set {', '.join(map(repr, unknown))}; valid: {', '.join(ALL_SETS)}")
    check_flags(request)
    return sets or []


def check_flags(request: Any) -> None:
    """The flags that are files, folders or names, judged before anything is built: each was once
    refused (or silently ignored) only after the model was built and HF's reference computed."""
    if request.weights is not None:
        check_weights_flags(request.weights, request.layers)
    if request.spec_file:
        load_spec_file(request.spec_file)  # missing, binary or not TOML: refused, not ignored on a CPU
    check_gpu_flag(request.gpu, request.spec_file, on_cpu=resolve_device(request.device) == "cpu")
    probe_output_dir(request.out)  # created by the run itself, once every flag has passed
    refuse_if_busy(request.out)  # a bench or model run writing there: refused before the model is built
