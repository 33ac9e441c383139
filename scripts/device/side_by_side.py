"""What the device sweeps share: check every entry against float64, time them in alternating rounds
of triton.testing.do_bench or the bench's own timer (so a drifting clock, a power cap, spreads over
all of them) and write the rows as CSV. Imported by the scripts beside it, which run as
`python3 scripts/device/X.py`."""

from __future__ import annotations

import contextlib
import csv
import json
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from triton.testing import do_bench

from rooflint.engine.correctness import check


def check_entries(family, dtype: str, entries: dict[str, Callable], reference, where: str = "",
                  drop_failures: bool = False) -> dict[str, str]:  # fmt: skip
    """Each entry's relative error against the float64 reference. Any failure stops the sweep, or
    with ``drop_failures`` is printed and its entry deleted from ``entries`` (a sweep over configs
    whose every config need not work)."""
    checks = {}
    for label, call in list(entries.items()):
        verdict = check(family, dtype, call(), reference)
        checks[label] = f"rel_err {verdict.error:.3g} (tolerance {verdict.tolerance:.3g})"
        if drop_failures and not verdict.passed:
            print(f"DROPPED {where} {label}: {verdict.message}", flush=True)
            del entries[label]
            continue
        assert verdict.passed, f"{where} {label}: {verdict.message}"
    return checks


def gpu_timing_setup(family_name: str, csv_name: str):
    """What an A/B on the bench's own timer starts from: (family, CUDA device, NVML sampler, L2 bytes
    to flush, the CSV's path under $OUT)."""
    import torch

    from rooflint.core.registry import get_family
    from rooflint.engine import nvml

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return get_family(family_name), torch.device("cuda"), nvml.sampler_for("cuda"), l2, output_csv(csv_name)


def load_module(path: Path | str, name: str):
    """A copy of a kernel module from a file (an older source, for an A/B in one process), imported
    under `name` and registered in sys.modules: a dataclass in it looks its module up there."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def output_csv(name: str) -> Path:
    """Where a sweep writes its CSV: $OUT/<name> on the device (the folder that comes back), else
    /tmp/rooflint-sweeps/<name>; the folder is made."""
    import os

    folder = Path(os.environ.get("OUT", "/tmp/rooflint-sweeps"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def check_row(family, params: dict, dtype: str, attend: Callable, name: str, rows: list[dict], path: Path,
              seed: int = 0, device: str = "cuda") -> None:  # fmt: skip
    """One float64 check of ``attend(case)`` as a row of ``rows``, written to ``path`` at once (a later
    config that hangs keeps it); a wrong result stops the sweep with its name."""
    import torch

    case = family.build_case("custom", params, dtype, torch.device(device), seed=seed)
    verdict = check(family, dtype, attend(case), family.reference(case.inputs, params))
    rows.append({"shape": name, "status": "ok" if verdict.passed else verdict.message, "rel_err": verdict.error})
    print(rows[-1], flush=True)
    write_rows(path, rows)
    if not verdict.passed:
        raise SystemExit(f"{name}: {verdict.message}")


def repeat_row(run: Callable, calls: int, rows: list[dict], path: Path, label: str = "") -> None:
    """Whether ``calls`` more calls of ``run`` give the first call's bits, as a row (a producer/consumer
    race shows as calls that differ)."""
    import torch

    first = run().clone()
    same = all(torch.equal(run(), first) for _ in range(calls))
    rows.append({"shape": f"{label}repeatable over {calls} calls", "status": "ok" if same else "differs"})
    print(rows[-1], flush=True)
    write_rows(path, rows)


def do_bench_ms(call: Callable) -> float:
    """triton.testing.do_bench's median over 100 ms of calls."""
    return do_bench(call, rep=100)


def bench_timer_ms(call: Callable) -> float:
    """`rooflint bench`'s own timer: a spin kernel before each flushed call, so the host's launch
    latency is not timed (do_bench times it where Python launches more slowly than the flush runs)."""
    import torch

    from rooflint.engine.timing import time_cuda

    return time_cuda(
        call, l2_bytes=torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    ).median_ms


def time_rounds(
    entries: dict[str, Callable], rounds: int, context=contextlib.nullcontext, timer: Callable = do_bench_ms
) -> dict[str, list[float]]:
    """Milliseconds per call of each entry, one timer median per round (do_bench unless told), the
    entries alternating."""
    times = {label: [] for label in entries}
    for _ in range(rounds):
        for label, call in entries.items():
            with context():
                times[label].append(timer(call))
    return times


def burst_rounds(calls: dict[str, Callable], rounds: int, l2: int, sampler, path: Path, rows: list[dict],
                 columns: dict[str, dict] | None = None) -> None:  # fmt: skip
    """Time each call by `rooflint bench`'s burst timer (start state, L2 flushed, NVML clock) in
    alternating rounds; each timing becomes a row of ``rows`` (round, entry, ms, clocks, plus
    ``columns[label]``), written to ``path`` at once so a sweep cut short keeps what it timed."""
    from rooflint.engine.timing import time_cuda

    for r in range(rounds):
        for label, call in calls.items():
            timing = time_cuda(call, l2_bytes=l2, sampler=sampler)
            t = timing.telemetry
            rows.append({"round": r, "entry": label, "ms": timing.median_ms, "clock_mhz": t.sm_clock_mhz,
                         "clock_min_mhz": t.sm_clock_min_mhz, **(columns or {}).get(label, {})})  # fmt: skip
            print(rows[-1], flush=True)
            write_rows(path, rows)


def check_and_burst(entries: dict[str, Callable], case, rounds: int, l2: int, sampler, path: Path,
                    rows: list[dict], drop_failures: bool = False) -> None:  # fmt: skip
    """One case's sweep: check_entries against the case's float64 reference (freed before timing),
    burst_rounds over the entries that passed (each row tagged with the case's shape and its check),
    then each entry's median over the rounds and its GB/s of the case's bytes, printed."""
    reference = case.family.reference(case.inputs, case.params)
    checks = check_entries(case.family, case.dtype_name, entries, reference, case.shape, drop_failures)
    del reference
    columns = {label: {"shape": case.shape, "check": checks[label]} for label in entries}
    burst_rounds(entries, rounds, l2, sampler, path, rows, columns)
    print(f"\n{case.shape}: medians over rounds")
    for label in entries:
        ms = median_of(rows, shape=case.shape, entry=label)
        print(f"  {label:48s} {ms:.4f} ms  {case.cost.bytes / ms / 1e6:7.0f} GB/s")


def median_of(rows: list[dict], column: str = "ms", **match) -> float:
    """The median of ``column`` over the rows whose fields equal ``match`` (entry=..., shape=...):
    what each sweep prints per entry after its rounds."""
    return statistics.median(row[column] for row in rows if all(row[key] == value for key, value in match.items()))


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def run_child(command: list[str], limit_s: float, identity: dict) -> list[dict]:
    """Run one config's child process under a time limit: the JSON rows it printed (lines starting
    "ROW "), plus a row saying how it failed or ran out of time, each tagged with the wall time. A
    child that hangs (a warp-specialized Triton kernel can) or crashes costs only its own rows."""
    started = time.time()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit_s)
        found = [json.loads(line[4:]) for line in done.stdout.splitlines() if line.startswith("ROW ")]
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
            found.append({**identity, "status": f"exit {done.returncode}: {tail}"})
    except subprocess.TimeoutExpired as expired:
        text = expired.stdout or ""
        text = text.decode() if isinstance(text, bytes) else text  # bytes even with text=True
        found = [json.loads(line[4:]) for line in text.splitlines() if line.startswith("ROW ")]
        found.append({**identity, "status": f"no result within {limit_s:.0f} s"})
    for row in found:
        row["wall_s"] = round(time.time() - started, 1)
        print(row, flush=True)
    return found


def write_rows(path: Path, rows: list[dict]) -> None:
    """Rows whose keys differ (ok rows and failure rows) as one CSV over the union of their keys."""
    columns = sorted({key for row in rows for key in row})
    write_csv(path, [{key: row.get(key, "") for key in columns} for row in rows])
