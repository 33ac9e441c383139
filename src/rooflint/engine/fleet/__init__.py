"""Fleets: one bench over the GPUs of a Dask cluster, rows streamed back into one results.csv.

``bench --scheduler local`` starts a cluster of one worker per GPU of this machine; ``--scheduler
tcp://host:8786`` uses a cluster started by hand, by dask-jobqueue or by dask-kubernetes
(docs/fleet.md). Each Dask task runs a few variants of one family x dtype x shape (``groups``),
the longest first by the durations of earlier runs (``durations``), through ``measuring.run_worker``:
the same child process (kept up across a worker's tasks), correctness gate, timer and throttle
checks as a local run. Dask itself is the optional extra
``rooflint[dask]``: nothing here imports it until a fleet runs.
"""

from rooflint.engine.fleet.request import INSTALL_HINT, LOCAL, dask_installed, remote_device, settle

__all__ = ["INSTALL_HINT", "LOCAL", "dask_installed", "remote_device", "settle", "run_fleet", "row_order"]


def run_fleet(*args, **kwargs):
    """``rooflint.engine.fleet.client.run_fleet``, imported on first use (it needs Dask)."""
    from rooflint.engine.fleet.client import run_fleet as run

    return run(*args, **kwargs)


def row_order(tasks):
    """``rooflint.engine.fleet.groups.row_order``: the sort key that puts a fleet's rows in plan order."""
    from rooflint.engine.fleet.groups import row_order as order

    return order(tasks)
