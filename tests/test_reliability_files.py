"""One strict reader for every results file: lint, report, compare, merge and roofline refuse a
malformed file with one line naming the file, the line and the field (exit 2), and accept what a
results file may hold (unknown columns, a UTF-8 byte-order mark, an older file's missing columns).

The named cases run the installed console script; the property tests feed the reader arbitrary
bytes and arbitrary mutations of a real results file (reports/h100/results.csv): a clean parse
or one line, never a traceback, and never a parse whose cells differ from the text.
"""

from __future__ import annotations

import csv
import io
import math
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from console_script import ROOFLINT, needs_console_script
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from result_factory import row, run, write

from rooflint.core.errors import UserError
from rooflint.outputs.results import COLUMNS, STATUSES, read_results

REAL = Path(__file__).parents[1] / "reports" / "h100" / "results.csv"


def _cells(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8-sig") as handle:
        return list(csv.reader(handle))


def _write_cells(cells: list[list[str]], path: Path) -> Path:
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(cells)
    return path


# Session scope: xdist may send this module's cases to its worker between other modules' tests, and a
# module-scoped fixture would then be built again (every subprocess run twice).
@pytest.fixture(scope="session")
def broken(tmp_path_factory) -> dict[str, tuple[Path, list[str]]]:
    """Each malformation of a valid file, with what its one error line must say."""
    root = tmp_path_factory.mktemp("broken")
    good = write(run(), root / "good")
    cells = _cells(good)
    header = cells[0]
    median, status = header.index("median_ms"), header.index("status")

    def variant(name: str, change, expected: list[str]) -> None:
        copy = [list(line) for line in cells]
        change(copy)
        out[name] = (_write_cells(copy, root / f"{name}.csv"), expected)

    out: dict[str, tuple[Path, list[str]]] = {"GOOD": (good, [])}
    for name, value, says in (
        ("nan", "nan", "median_ms nan on an ok row"),
        ("inf", "inf", "median_ms inf is not a finite time"),
        ("huge", "1e300", "median_ms 1e+300 on an ok row"),
        ("text", "fast", "median_ms 'fast' is not a number"),
    ):
        variant(name, lambda c, v=value: c[1].__setitem__(median, v), ["line 2", says])
    variant("ragged", lambda c: c[2].append("stray"), ["line 3", f"{len(header) + 1} fields", f"has {len(header)}"])
    variant("header", lambda c: c.insert(3, list(header)), ["line 4", "header repeated"])
    variant("status", lambda c: c[1].__setitem__(status, "great"), ["line 2", "status 'great'", "valid: ok"])
    truncated = root / "truncated.csv"
    truncated.write_bytes(good.read_bytes()[:-25])
    out["truncated"] = (truncated, ["line 5", "truncated"])
    return out


CASES = ["nan", "inf", "huge", "text", "ragged", "header", "status", "truncated"]
COMMANDS = ["lint", "report", "compare", "merge", "roofline"]
# Each malformation and each command once through the installed console script (the entry point, its
# error handling, no traceback: a subprocess apiece, as a user runs it); the rest of the matrix goes
# through the same Typer app in this process, where a case costs milliseconds instead of an import
# of the whole tool.
CONSOLE_SCRIPT = {(name, COMMANDS[i % len(COMMANDS)]) for i, name in enumerate(CASES)}


@pytest.fixture(scope="session")
def outcomes(broken, tmp_path_factory) -> dict[tuple[str, str], subprocess.CompletedProcess]:
    from typer.testing import CliRunner

    from rooflint.cli.app import app

    root = tmp_path_factory.mktemp("runs")
    env = dict(os.environ, ROOFLINT_CACHE=str(root / "cache"), COLUMNS="200")
    env.pop("ROOFLINT_DEBUG", None)
    good = str(broken["GOOD"][0])

    def commands(path: str) -> dict[str, list[str]]:
        return {
            "lint": ["lint", path],
            "report": ["report", path],
            "compare": ["compare", good, path],
            "merge": ["merge", good, path, "--out", str(root / "merged.csv")],
            "roofline": ["roofline", path, "--out", str(root / "roofline")],
        }

    jobs = [
        (name, command, argv)
        for name in broken
        if name != "GOOD"
        for command, argv in commands(str(broken[name][0])).items()
    ]

    def one(job):
        name, command, argv = job
        done = subprocess.run([ROOFLINT, *argv], capture_output=True, text=True, timeout=300, env=env, check=False)
        return (name, command), done

    runner = CliRunner()
    found = {}
    for name, command, argv in jobs:
        if (name, command) not in CONSOLE_SCRIPT:
            result = runner.invoke(app, argv, env={"COLUMNS": "200"})
            found[(name, command)] = subprocess.CompletedProcess(argv, result.exit_code, result.stdout, result.stderr)
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        found.update(pool.map(one, [job for job in jobs if (job[0], job[1]) in CONSOLE_SCRIPT]))
    return found


@needs_console_script
@pytest.mark.xdist_group("cli_malformed_files")
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("name", CASES)
def test_every_command_refuses_a_malformed_file_in_one_line(outcomes, broken, name, command):
    done = outcomes[(name, command)]
    path, expected = broken[name]
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error:"), done.stderr
    assert str(path) in errors[0]
    for text in expected:
        assert text in errors[0], errors[0]


def test_a_byte_order_mark_unknown_columns_and_an_old_schema_are_read(tmp_path):
    cells = _cells(write(run(), tmp_path / "good"))
    cells[0].append("my_note")  # a column rooflint does not know
    for line in cells[1:]:
        line.append("kept")
    for old in ("host", "library", "library_version"):  # an older file lacks the newest columns
        at = cells[0].index(old)
        for line in cells:
            del line[at]
    path = _write_cells(cells, tmp_path / "bom.csv")
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    frame = read_results(path)
    assert list(frame["family"]) == ["vector_add", "vector_add", "softmax", "softmax"]
    assert list(frame["my_note"]) == ["kept"] * 4 and list(frame["host"]) == [""] * 4
    assert frame["median_ms"].tolist() == pytest.approx([0.60, 0.55, 0.12, 0.09])


def test_json_results_get_the_same_checks(tmp_path):
    rows = run()
    rows[2].median_ms = math.inf
    from rooflint.outputs.results import write_json

    write_json(rows, tmp_path / "r.json")  # inf is written as null: an ok row without a time
    with pytest.raises(UserError, match=r"r\.json row 3: median_ms nan on an ok row"):
        read_results(tmp_path / "r.json")


@needs_console_script
def test_the_markdown_report_escapes_what_comes_from_the_file(tmp_path):
    hostile = [
        row("<script>alert(1)</script>", "eager```\n<b>", 0.5, message="x"),
        row("<script>alert(1)</script>", "*b*|[l](u)", 0.4, status="failed", message="<img src=x onerror=alert(1)>"),
    ]
    path = write(hostile, tmp_path / "hostile")
    done = subprocess.run([ROOFLINT, "report", str(path)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr  # the failed row: written, and said in the exit status
    assert "failing: 1 row did not pass (1 failed): <script>alert(1)</script>/*b*|[l](u) bf16" in done.stderr
    fenced = done.stdout.split("```")
    outside, inside = "".join(fenced[::2]), "".join(fenced[1::2])  # HTML in a code fence is text
    assert "<script>" not in outside and "<img" not in outside
    assert len(fenced) % 2 == 1 and "`" not in inside  # every fence closed where rooflint closed it
    assert "### &lt;script>alert(1)&lt;/script>" in done.stdout
    assert r"\*b\*\|\[l\](u)" in done.stdout  # no emphasis, no link, no extra table cell


# ------------------------------------------------------------------------------ property tests


def _parse(path: Path):
    """read_results: a frame, or UserError of one line naming the file; any other exception fails."""
    try:
        return read_results(path)
    except UserError as error:
        message = str(error)
        assert "\n" not in message and str(path) in message, message
        return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=2000), suffix=st.sampled_from([".csv", ".json"]))
def test_arbitrary_bytes_parse_cleanly_or_give_one_line(tmp_path, data, suffix):
    path = tmp_path / f"any{suffix}"
    path.write_bytes(data)
    frame = _parse(path)
    if frame is not None:
        assert set(frame["status"]) <= set(STATUSES)


def _mutate(text: str, kind: str, at: float, length: int, junk: str) -> str:
    where = int(at * len(text))
    if kind == "cut":
        return text[:where]
    if kind == "delete":
        return text[:where] + text[where + length :]
    if kind == "insert":
        return text[:where] + junk + text[where:]
    lines = text.splitlines(keepends=True)
    line = 1 + int(at * (len(lines) - 2))  # a data line: 1 .. len(lines) - 1, at=1.0 included
    if kind == "duplicate":
        return "".join(lines[: line + 1] + [lines[line]] + lines[line + 1 :])
    # "cell": one cell of one row replaced by junk
    cells = list(csv.reader(io.StringIO(text)))
    row_index = 1 + int(at * (len(cells) - 2))
    cells[row_index][length % len(cells[0])] = junk
    out = io.StringIO()
    csv.writer(out).writerows(cells)
    return out.getvalue()


@pytest.mark.skipif(not REAL.exists(), reason="reports/h100/results.csv is not in this checkout")
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(["cut", "delete", "insert", "duplicate", "cell"]),
    at=st.floats(0, 1),
    length=st.integers(1, 400),
    junk=st.text(max_size=12),
)
def test_a_mutated_real_file_parses_cleanly_or_gives_one_line_never_a_misread(tmp_path, kind, at, length, junk):
    text = REAL.read_text()
    path = tmp_path / "mutated.csv"
    path.write_text(_mutate(text, kind, at, length, junk), newline="")
    frame = _parse(path)
    if frame is None:
        return
    # Parsed: then every value is the one its line holds in its own column, read independently.
    cells = [line for line in csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"), newline="")) if line]
    header = [name.strip() for name in cells[0]]
    records = [dict(zip(header, line)) for line in cells[1:]]
    assert len(frame) == len(records)
    assert all(len(line) == len(header) for line in cells[1:])
    # Rows as dicts of the frame's values: iterrows builds a Series a row (most of this test's time).
    for parsed, record in zip(frame.to_dict("records"), records):
        assert parsed["status"] == record["status"].strip() and parsed["status"] in STATUSES
        for name in ("median_ms", "p20_ms", "p80_ms", "n_samples", "tensor_flops", "ideal_bytes"):
            if name not in record:
                continue
            written = record[name].strip()
            value = float(written) if written not in ("", "nan", "NaN") else math.nan
            assert (math.isnan(value) and math.isnan(parsed[name])) or parsed[name] == value, (name, written)
        if parsed["status"] == "ok":
            assert 0 < parsed["median_ms"] < 86_400_000
    assert list(frame.columns[: len(COLUMNS)]) == COLUMNS
