"""This host's CPU ceilings, measured by rooflint once per test process and put into the fresh cache of
each bench or model run that the tests start.

A CPU bench or model run measures the CPU's ceilings (a 128 MiB copy and a few matmuls, about 3 s on
a 2-core runner) unless its cache holds this host's measurement of the last ten minutes
(rooflint.engine.ceilings.cpu_ceilings). The tests give each run a cache of its own, so each run paid
for that measurement again. ``seed(cache)`` writes there the file a measurement made by rooflint
itself left, as a bench made it; such a run then reads it as it reads its own last measurement. The
measurement itself is tested by test_ceilings.py and `rooflint ceilings`, which never read it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# Measured again once this old: a run reuses a stored measurement for ten minutes from its making
# (rooflint.engine.ceilings.CPU_CEILINGS_MAX_AGE_S), and a seeded run reads it within seconds of its
# start, so what is left of the ten minutes is margin. Each measurement costs a test process seconds
# of a core that its other tests are waiting for: as seldom as that margin allows.
FRESH_S = 480.0

_measured: tuple[float, str] | None = None
_lock = threading.Lock()  # fixtures start their runs from two threads


def _measurement() -> str | None:
    """The stored-ceilings file of a fresh measurement, made in a Python of its own with the tests'
    environment (its OMP_NUM_THREADS is part of what a run matches); None where it could not be made."""
    global _measured
    if _measured is not None and time.time() - _measured[0] < FRESH_S:
        return _measured[1]
    with tempfile.TemporaryDirectory(prefix="rooflint-cpu-ceilings-") as cache:
        env = dict(os.environ, ROOFLINT_CACHE=cache)
        env.pop("ROOFLINT_CPU_CEILINGS_CACHE", None)
        started = time.time()
        done = subprocess.run(
            [sys.executable, "-c", "from rooflint.engine.ceilings import cpu_ceilings; cpu_ceilings()"],
            env=env,
            capture_output=True,
            timeout=300,
            check=False,
        )
        stored = Path(cache, "ceilings", f"cpu-{socket.gethostname()}.json")
        if done.returncode != 0 or not stored.exists():
            return None
        _measured = (started, stored.read_text())
    return _measured[1]


def seed(cache: Path | str) -> bool:
    """Put this host's CPU ceilings, measured in the last few minutes, into the rooflint cache ``cache``
    (as $ROOFLINT_CACHE), unless it holds a measurement already. Whether it holds one now: False where
    the measurement could not be made (a run there then measures for itself)."""
    target = Path(cache, "ceilings", f"cpu-{socket.gethostname()}.json")
    if Path(cache).is_file():  # a cache that is a file is some test's own case
        return False
    if target.exists():
        return True
    with _lock:
        text = _measurement()
        if text is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    return text is not None


def written_besides_the_seed(folder: Path) -> list[str]:
    """Every file and folder under ``folder`` (relative to it), less the ceilings ``seed`` put into
    its cache and the folders holding them: what a run there wrote."""
    seeded = Path("cache", "ceilings", f"cpu-{socket.gethostname()}.json")
    found = (path.relative_to(folder) for path in Path(folder).rglob("*"))
    return sorted(str(path) for path in found if path not in (seeded, *seeded.parents))
