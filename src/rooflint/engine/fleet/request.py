"""The fleet fields of a bench request (--scheduler, --gpu-types), filled and checked by prepare()."""

from __future__ import annotations

import importlib.util

from rooflint.core.errors import UserError
from rooflint.engine.request import BenchRequest

LOCAL = "local"  # --scheduler local: a Dask cluster of this machine's GPUs, one worker each
INSTALL_HINT = 'pip install "rooflint[dask]"'


def dask_installed() -> bool:
    return importlib.util.find_spec("distributed") is not None


def remote_device(request: BenchRequest) -> str | None:
    """The device of a run on a remote cluster, else None.

    The workers hold the GPUs there, so the client needs none: a laptop can drive a GPU cluster.
    """
    if not request.scheduler or request.scheduler == LOCAL:
        return None
    # Only a device left out means cuda: an empty one (`--device "$DEVICE"`, unset) is refused as locally.
    device = "cuda" if request.device is None else request.device
    if device not in ("cuda", "cpu"):
        raise UserError(f"unknown device {device!r}; valid: cuda, cpu")
    return device


def check_scheduler_named(scheduler: str | None) -> None:
    """An empty --scheduler (an unset variable) is refused, not read as "no fleet"."""
    if scheduler is not None and not scheduler.strip():
        raise UserError("--scheduler '' names no scheduler; valid: local, or an address such as tcp://head:8786")


def settle(request: BenchRequest) -> None:
    """Fill and check a request's fleet fields in place, before anything runs.

    Several ``--devices`` without ``--scheduler`` run on a local Dask cluster when Dask is
    installed; without it they keep the thread pool of one worker process per GPU.
    """
    check_scheduler_named(request.scheduler)
    if not request.scheduler and len(request.devices) > 1 and dask_installed():
        request.scheduler = LOCAL
    if request.gpu_types and not request.scheduler:
        raise UserError("--gpu-types chooses among the GPU types of a Dask cluster; add --scheduler ADDRESS or local")
    if not request.scheduler:
        request.scheduler = None
        return
    if not dask_installed():
        raise UserError(f"--scheduler needs Dask, which is not installed: {INSTALL_HINT}")
    if request.scheduler != LOCAL:
        check_address(request.scheduler)
    if request.scheduler != LOCAL and request.devices:
        raise UserError(
            "--devices picks GPUs of this machine; the workers of a cluster (--scheduler ADDRESS) "
            "each hold their own: choose with --gpu-types"
        )


def check_address(address: str) -> None:
    """Refuse a malformed scheduler address at once: Dask would retry a port past 65535 for the whole
    connect timeout and then report a timeout, as if the scheduler were merely down."""
    from distributed.comm.addressing import parse_address, parse_host_port

    valid = "valid: local, or a scheduler address such as tcp://head:8786"
    try:
        scheme, location = parse_address(address)
        port = parse_host_port(location)[1] if scheme in ("tcp", "tls") else 1
    except ValueError as error:
        raise UserError(f"--scheduler {address!r} is not a scheduler address ({error}); {valid}") from None
    if not 0 < port < 65536:
        raise UserError(f"--scheduler {address!r}: port {port} is not one of 1-65535; {valid}")
