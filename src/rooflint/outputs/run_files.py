"""The names of what a bench writes or keeps in its --out folder, in one place: results.csv and
.json, the last run's moved aside as results.prev.*, and the rooflines (outputs/plot.roofline_base):
roofline.png/.svg/.csv, roofline-<gpu>.* for each of several GPUs or a model run's
roofline-<config>-<set>-<phase>.* (a config may hold dots: qwen2.5-0.5b), and their .prev copies."""

from __future__ import annotations

import re

RESULT_FILES = ("results.csv", "results.json")
PREVIOUS_RESULT_FILES = ("results.prev.csv", "results.prev.json")
# The measuring processes' stderr: one GPU's (or the CPU's), each GPU's of several, and a fleet's two
# logs (what ran where; the measuring processes' stderr, per task).
WORKER_LOG = "worker.log"
FLEET_LOG, FLEET_WORKERS_LOG = "fleet.log", "fleet-workers.log"


def gpu_worker_log(index: int) -> str:
    """The log of GPU ``index``'s measuring process, where one bench runs several GPUs."""
    return f"worker-gpu{index}.log"


_ROOFLINE = re.compile(r"roofline(-.+?)?(\.prev)?\.(png|svg|csv)")


def roofline_file(name: str) -> str | None:
    """ "current" for a roofline a run draws, "previous" for one the next run moved aside
    (engine/bench.keep_previous), None for any other name."""
    match = _ROOFLINE.fullmatch(name)
    if match is None:
        return None
    return "previous" if match.group(2) else "current"


def run_file(name: str) -> bool:
    """Whether ``name`` is one of the files a run writes or keeps in its folder."""
    return name in RESULT_FILES + PREVIOUS_RESULT_FILES or roofline_file(name) is not None
