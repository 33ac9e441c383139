"""The bench flags that can be judged without torch or any family module: the roof, the spec file,
the output folder and JUnit path, the GPU name and the family names.

`rooflint bench` calls this before it imports the engine, so a typo is answered in a fraction of a
second instead of after torch's import (seconds); `bench.prepare` calls it too, so a request made
through the Python API is checked the same way.
"""

from __future__ import annotations

from pathlib import Path

from rooflint.core.errors import UserError
from rooflint.core.paths import probe_output_dir, same_file, writable_file
from rooflint.core.registry import resolve_families
from rooflint.core.roofs import ROOF_CHOICES
from rooflint.core.specs import check_gpu_flag, load_spec_file
from rooflint.engine.fleet.request import check_scheduler_named
from rooflint.engine.request import BenchRequest
from rooflint.outputs.folder_lock import refuse_if_busy
from rooflint.outputs.run_files import (
    FLEET_LOG,
    FLEET_WORKERS_LOG,
    PREVIOUS_RESULT_FILES,
    RESULT_FILES,
    WORKER_LOG,
    gpu_worker_log,
    run_file,
)


def check_flags(request: BenchRequest) -> None:
    if request.roof not in ROOF_CHOICES:
        raise UserError(f"unknown roof {request.roof!r}; valid: {', '.join(ROOF_CHOICES)}")
    if request.spec_file:
        load_spec_file(request.spec_file)  # missing, binary or not TOML: refused before the run, not ignored
    # Every place a result goes is proved writable now, not after the measuring.
    probe_output_dir(request.out)  # created by the run itself, once every flag has passed
    refuse_if_busy(request.out)
    _refuse_folders_over_run_files(request)
    if request.junit:
        _refuse_junit_over_results(request)
        writable_file(request.junit, "JUnit report")
    check_gpu_flag(request.gpu, request.spec_file, on_cpu=request.device == "cpu")
    # "all" with other names still checks each of them: `bench all nosuch` names nosuch.
    resolve_families([name for name in request.families if name != "all"])
    # settle() refuses it too, but only after prepare has imported torch (seconds for one line).
    check_scheduler_named(request.scheduler)


def _refuse_folders_over_run_files(request: BenchRequest) -> None:
    """A folder in --out where the run writes, or moves aside, one of its files: a folder named
    worker.log, results.prev.csv or roofline.prev.png stopped the run with a bare IsADirectoryError
    (exit 1, nothing measured), and one named results.csv was moved to results.prev.csv without a word."""
    if request.scheduler:
        logs = [FLEET_LOG, FLEET_WORKERS_LOG]
    elif len(request.devices) > 1:
        logs = [gpu_worker_log(index) for index in request.devices]
    else:
        logs = [WORKER_LOG]
    out = Path(request.out)
    # The rooflines' names hold the GPU's, known later: any folder named as one (roofline.prev.png) counts.
    rooflines = [path.name for path in out.iterdir() if run_file(path.name)] if out.is_dir() else []
    for name in [*RESULT_FILES, *PREVIOUS_RESULT_FILES, *logs, *rooflines]:
        if (out / name).is_dir():
            raise UserError(
                f"cannot write to output directory {request.out}: {out / name} is a folder where the run "
                f"writes its {name}; move that folder, or give another --out"
            )


def _refuse_junit_over_results(request: BenchRequest) -> None:
    """--junit naming a file the run writes or keeps in its folder would replace it with the XML, or
    be replaced by it: over results.csv the rows were lost; over results.prev.csv the last run's
    rows, over roofline.csv the JUnit report itself (the plot written after it), each exit 0."""
    junit, out = Path(request.junit), Path(request.out)
    # By another name too: a link to the results (a roofline's name is the run's GPU, known later).
    names = [*RESULT_FILES, *PREVIOUS_RESULT_FILES]
    for name in [junit.name] if run_file(junit.name) else names:
        if same_file(junit, out / name):
            raise UserError(
                f"--junit {request.junit} is the run's own {name} in {request.out}; give the JUnit report another name"
            )
