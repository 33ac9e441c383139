"""Bad input through the installed `rooflint` console script: one clear error line saying what is
valid, exit code 2, never a traceback, and for bench no measurement before the error.

Every case runs the console script's entry point, rooflint.cli.main, so a usage error that escapes
it fails here. The first case of each command runs the installed script in a subprocess (as a user
or a CI job does), so an import the console script cannot make fails here too; the rest run the same
entry point in this process (tests/cli_in_process.py), where a case costs milliseconds instead of a
Python and the tool's imports.
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cli_in_process import rooflint_in_process
from console_script import ROOFLINT, needs_console_script
from filelock import FileLock
from result_factory import run, write

pytestmark = [
    needs_console_script,
    # One xdist worker takes every case, so the module fixture's 30 subprocesses run once, not per worker.
    pytest.mark.xdist_group("cli_bad_input"),
]


# Session scope: xdist may send this module's cases to its worker between other modules' tests, and a
# module-scoped fixture would then be built again (every subprocess run twice).
@pytest.fixture(scope="session")
def files(tmp_path_factory) -> dict[str, str]:
    """Fixture paths by name: valid results, broken ones, a folder, and a file blocking an --out."""
    root = tmp_path_factory.mktemp("bad_input")
    negative = run()
    negative[1].median_ms = -0.55  # a hand-edited or corrupted time on an ok row
    zero = run()
    zero[0].median_ms = 0.0
    malformed = root / "malformed.csv"
    malformed.write_text('family,variant\n1,2,3,4\n"unterminated')
    blocker = root / "blocker"
    blocker.write_text("a file where a folder would have to be")
    (root / "folder").mkdir()
    binary = root / "binary.toml"
    binary.write_bytes(bytes(range(256)) * 4)  # a binary file given where a TOML spec belongs
    return {
        "BINARY": str(binary),
        "RESULTS": str(write(run(), root / "results")),
        "NEGATIVE": str(write(negative, root / "negative")),
        "ZERO": str(write(zero, root / "zero")),
        "OTHER": str(write(run()[2:], root / "other")),  # softmax only
        "VECTOR_ADD": str(write(run()[:2], root / "vector_add")),  # vector_add only
        "MALFORMED": str(malformed),
        "FOLDER": str(root / "folder"),
        "UNWRITABLE": str(blocker / "sub"),  # mkdir under a regular file fails on every OS
        "OUT": str(root / "out"),
    }


# (id, arguments, what stderr must say). Every case exits 2. Arguments name fixtures in capitals.
CASES = [
    ("bench_unknown_option", ["bench", "--nosuchopt"], ["No such option: --nosuchopt", "--help"]),
    ("list_extra_argument", ["list", "extra"], ["unexpected extra argument", "--help"]),
    ("unknown_command", ["nosuchcommand"], ["No such command 'nosuchcommand'", "--help"]),
    ("merge_without_files", ["merge"], ["Missing argument", "--help"]),
    ("lint_folder", ["lint", "FOLDER"], ["is a directory", "give a file"]),
    ("compare_folders", ["compare", "FOLDER", "FOLDER"], ["is a directory", "give a file"]),
    ("report_folder", ["report", "FOLDER"], ["is a directory", "give a file"]),
    ("merge_folder", ["merge", "FOLDER", "--out", "OUT/merged.csv"], ["is a directory", "give a file"]),
    ("lint_missing_file", ["lint", "FOLDER/none.csv"], ["does not exist"]),
    ("report_out_under_a_file", ["report", "RESULTS", "--out", "UNWRITABLE/report.md"], ["cannot write"]),
    ("compare_out_under_a_file", ["compare", "RESULTS", "RESULTS", "--out", "UNWRITABLE/d.md"], ["cannot write"]),
    ("merge_out_under_a_file", ["merge", "RESULTS", "--out", "UNWRITABLE/m.csv"], ["cannot write"]),
    ("lint_roof_bogus", ["lint", "RESULTS", "--roof", "bogus"], ["unknown roof 'bogus'", "valid: datasheet, measured"]),
    ("lint_gpu_unknown", ["lint", "RESULTS", "--gpu", "z80"], ["unknown GPU 'z80'", "valid:", "h100_sxm"]),
    ("ceilings_gpu_unknown", ["ceilings", "--device", "cpu", "--gpu", "z80"], ["unknown GPU 'z80'", "valid:"]),
    ("lint_negative_time", ["lint", "NEGATIVE"], ["median_ms -0.55", "valid: a time above 0"]),
    ("lint_zero_time", ["lint", "ZERO"], ["median_ms 0", "valid: a time above 0"]),
    ("compare_negative_time", ["compare", "RESULTS", "NEGATIVE"], ["median_ms -0.55", "valid: a time above 0"]),
    (
        "compare_nothing_in_common",
        ["compare", "VECTOR_ADD", "OTHER"],
        ["share no (family, variant, dtype, shape, gpu) row"],
    ),
    ("compare_bad_threshold", ["compare", "RESULTS", "RESULTS", "--threshold", "x"], ["bad threshold", "e.g. 5%"]),
    ("lint_malformed_csv", ["lint", "MALFORMED"], ["is not a"]),
    ("compare_malformed_csv", ["compare", "MALFORMED", "RESULTS"], ["is not a rooflint results file"]),
    ("report_malformed_csv", ["report", "MALFORMED"], ["is not a rooflint results file"]),
    ("report_unknown_format", ["report", "RESULTS", "--format", "pdf"], ["pdf", "md"]),
    # bench: the error comes from engine.bench.prepare, before any worker starts or any row is timed.
    ("bench_roof_bogus", ["bench", "vector_add", "--roof", "bogus"], ["unknown roof 'bogus'", "valid: datasheet"]),
    ("bench_gpu_unknown", ["bench", "vector_add", "--gpu", "nosuchgpu"], ["unknown GPU 'nosuchgpu'", "valid:"]),
    ("bench_unknown_family", ["bench", "nosuchfamily"], ["unknown family 'nosuchfamily'", "valid:", "vector_add"]),
    ("bench_unknown_variant", ["bench", "vector_add", "-V", "nosuch"], ["unknown variant 'nosuch'", "valid:"]),
    ("bench_unknown_dtype", ["bench", "vector_add", "--dtype", "int3"], ["unknown dtype 'int3'", "valid:"]),
    ("bench_unknown_size", ["bench", "vector_add", "--size", "huge"], ["unknown size 'huge'", "valid:"]),
    ("bench_out_under_a_file", ["bench", "vector_add", "--out", "UNWRITABLE"], ["cannot write"]),
    # Every flag is checked before any work: none is ignored, none is found bad after the run.
    ("bench_spec_file_missing", ["bench", "vector_add", "--spec-file", "FOLDER/none.toml"], ["does not exist"]),
    ("bench_spec_file_binary", ["bench", "vector_add", "--spec-file", "BINARY"], ["is not a TOML text file"]),
    ("specs_spec_file_binary", ["specs", "--spec-file", "BINARY"], ["is not a TOML text file"]),
    (
        "roofline_spec_file_missing",
        ["roofline", "RESULTS", "--spec-file", "FOLDER/none.toml", "--out", "OUT/roofline"],
        ["spec file", "does not exist"],
    ),
    ("bench_junit_unwritable", ["bench", "vector_add", "--junit", "UNWRITABLE/j.xml"], ["cannot write JUnit report"]),
    ("bench_empty_variants", ["bench", "vector_add", "--variants", ""], ["--variants", "names nothing"]),
    ("bench_all_and_unknown", ["bench", "all", "nosuch"], ["unknown family 'nosuch'", "valid:"]),
    (
        "bench_size_beyond_memory",
        ["bench", "vector_add", "--size", "n=100000000000000"],
        ["needs at least", "for its inputs and outputs", "pick a smaller --size"],
    ),
    # A size that passes the parser and the cost model but no kernel takes: refused before any worker
    # runs, not reported as every variant crashing.
    (
        "bench_attention_head_dim",
        ["bench", "attention", "--size", "D=63"],
        ["attention head_dim D must be one of (64, 128, 256), not 63"],
    ),
    ("doctor_gpu_unknown", ["doctor", "--gpu", "nosuch"], ["unknown GPU 'nosuch'", "valid:"]),
    ("doctor_json_unwritable", ["doctor", "--json", "UNWRITABLE/d.json"], ["cannot write doctor report"]),
    ("model_unknown_config", ["model", "gpt2", "--config", "gpt2-huge"], ["unknown gpt2 config 'gpt2-huge'", "valid:"]),
]


# The first case of each command (and of an unknown one) goes through the installed script.
CONSOLE_SCRIPT = set({arguments[0]: name for name, arguments, _ in reversed(CASES)}.values())


def _resolve(arguments: list[str], files: dict[str, str]) -> list[str]:
    out = []
    for argument in arguments:
        head, _, tail = argument.partition("/")
        out.append(files[head] + ("/" + tail if tail else "") if head in files else argument)
    return out


@pytest.fixture(scope="session")
def outcomes(files, tmp_path_factory, worker_id) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """Every case run once, the console-script cases several at a time. Under xdist the cases can land on
    both workers: the first to get here runs them all and the other reads its outcomes (the run-once
    pattern of pytest-xdist's docs), so no subprocess runs twice."""
    if worker_id == "master":
        return _run_cases(files, tmp_path_factory.mktemp("runs"))
    shared = tmp_path_factory.getbasetemp().parent / "bad_input_outcomes.json"
    with FileLock(f"{shared}.lock"):
        if not shared.exists():
            runs = _run_cases(files, tmp_path_factory.mktemp("runs"))
            record = {name: [done.returncode, done.stdout, done.stderr, str(out)] for name, (done, out) in runs.items()}
            shared.write_text(json.dumps(record))
        record = json.loads(shared.read_text())
    return {
        name: (subprocess.CompletedProcess([], code, out, err), Path(path))
        for name, (code, out, err, path) in record.items()
    }


def _run_cases(files, root: Path) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    env = dict(os.environ, ROOFLINT_CACHE=str(root / "cache"), COLUMNS="200")
    env.pop("ROOFLINT_DEBUG", None)

    def arguments(case) -> tuple[list[str], Path]:
        name, arguments, _ = case
        argv, bench_out = _resolve(arguments, files), root / name / "bench"
        bench_out.parent.mkdir()
        if argv[0] == "bench":
            # On the CPU, into a scratch folder: the error must come before anything is measured.
            argv += [] if "--out" in argv else ["--out", str(bench_out)]
            argv += ["--device", "cpu"]
        return argv, bench_out

    def script(case) -> tuple[subprocess.CompletedProcess, Path]:
        argv, bench_out = arguments(case)
        done = subprocess.run(
            [ROOFLINT, *argv], capture_output=True, text=True, timeout=300, cwd=bench_out.parent, env=env, check=False
        )
        return done, bench_out

    def here(case) -> tuple[subprocess.CompletedProcess, Path]:
        argv, bench_out = arguments(case)
        changed = {key: env[key] for key in ("ROOFLINT_CACHE", "COLUMNS")}
        with pytest.MonkeyPatch.context() as patch:
            patch.delenv("ROOFLINT_DEBUG", raising=False)
            return rooflint_in_process(*argv, env=changed, cwd=bench_out.parent), bench_out

    # In this process one at a time (it changes the working folder), then the scripts side by side.
    found = {case[0]: here(case) for case in CASES if case[0] not in CONSOLE_SCRIPT}
    scripted = [case for case in CASES if case[0] in CONSOLE_SCRIPT]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        found.update(zip([case[0] for case in scripted], pool.map(script, scripted)))
    return {case[0]: found[case[0]] for case in CASES}


@pytest.mark.parametrize("name, expected", [(case[0], case[2]) for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_one_line_and_exit_2(outcomes, name, expected):
    done, bench_out = outcomes[name]
    everything = done.stdout + done.stderr
    assert done.returncode == 2, everything
    assert "Traceback" not in everything
    errors = [line for line in done.stderr.splitlines() if line.lower().startswith("error")]
    assert len(errors) == 1, done.stderr  # one clear line, and only one
    assert [line for line in done.stderr.splitlines() if line.strip()] == errors  # no Usage/Try, no "building"
    assert not done.stdout.strip(), done.stdout  # nothing printed (a doctor table, a bench row) before it
    for text in expected:
        assert text in done.stderr, done.stderr
    assert not (bench_out / "results.csv").exists()  # nothing was measured
