"""What every result row records about where and when it was measured."""

from __future__ import annotations

import datetime
import functools
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from rooflint import __version__
from rooflint.engine.host import host_name

if TYPE_CHECKING:
    from rooflint.core.specs import GpuSpec
    from rooflint.outputs.results import ResultRow


@dataclass(frozen=True)
class Environment:
    device_name: str
    torch_version: str
    triton_version: str
    cuda_version: str
    rooflint_version: str
    git_commit: str


@functools.cache
def git_commit() -> str:
    """rooflint's own commit: ROOFLINT_GIT_COMMIT if set (a copied tree without .git, as on a
    lent GPU box), else git in the checkout, else 'unknown' (an installed wheel)."""
    if os.environ.get("ROOFLINT_GIT_COMMIT"):
        return os.environ["ROOFLINT_GIT_COMMIT"]
    here = Path(__file__).resolve().parent
    try:
        result = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if result.returncode == 0:
            dirty = subprocess.run(
                ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=5,
            )
            return result.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def triton_version() -> str:
    try:
        import triton

        return triton.__version__
    except ImportError:
        return ""


@functools.cache
def collect(device: str) -> Environment:
    if device == "cuda":
        name = torch.cuda.get_device_name()
    else:
        name = platform.processor() or platform.machine() or "cpu"
    return Environment(
        device_name=name,
        torch_version=torch.__version__,
        triton_version=triton_version(),
        cuda_version=torch.version.cuda or "",
        rooflint_version=__version__,
        git_commit=git_commit(),
    )


def physical_gpu_index() -> int:
    """The current GPU's index as nvidia-smi numbers it, through CUDA_VISIBLE_DEVICES' remapping
    (bench --devices gives each worker one GPU, which that worker sees as device 0)."""
    index = torch.cuda.current_device()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    if index < len(visible) and visible[index].strip().isdigit():
        return int(visible[index])
    return index


def timestamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def stamp(row: ResultRow, spec: GpuSpec, device: str, env: Environment | None = None) -> ResultRow:
    """Fill in where and when a row was measured and on which roof it is judged: bench's worker and
    `rooflint model` both stamp their rows here, so the two kinds of row carry the same columns."""
    env = env or collect(device)
    row.gpu = spec.key
    row.device_name = env.device_name
    row.device_index = physical_gpu_index() if device == "cuda" else -1
    row.sm_count = int(spec.get("sm_count") or 0)
    row.l2_bytes = spec.l2_bytes
    row.torch_version, row.triton_version, row.cuda_version = env.torch_version, env.triton_version, env.cuda_version
    row.rooflint_version, row.git_commit = env.rooflint_version, env.git_commit
    row.timestamp = timestamp()
    row.ceiling_source = spec.origin  # datasheet | measured | user (a --spec-file GPU)
    row.host = host_name()  # a fleet measures one plan on many machines
    return row
