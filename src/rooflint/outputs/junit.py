"""JUnit XML of bench's correctness checks, so CI shows a failing variant as a failing test."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from rooflint.core.errors import UserError
from rooflint.core.paths import replacing, why_not
from rooflint.outputs.results import FAILED, OK, SKIPPED, ResultRow

# Characters XML 1.0 cannot hold, escaped or not: ElementTree writes them as they are and every
# parser then rejects the whole file. A compiler's coloured error (ESC) in one row's message would
# cost CI every row's result.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def _xml(text: str) -> str:
    return _NOT_XML.sub("?", text)


def write_junit(rows: list[ResultRow], path: Path, not_run: int = 0) -> None:
    """One test case per row, in a suite per family: failed correctness is a <failure>, a crash,
    error or out-of-memory an <error>, a variant that cannot run here <skipped>. ``not_run``: rows
    of the plan a stopped run (Ctrl-C, SIGTERM) never reached, one <error> in a suite of their own:
    without it the rows it did measure read as a whole run that passed."""
    root = ET.Element("testsuites", name="rooflint")
    suites: dict[str, ET.Element] = {}
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        suite = suites.get(row.family)
        if suite is None:
            suite = suites[row.family] = ET.SubElement(root, "testsuite", name=f"rooflint.{row.family}")
            counts[row.family] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        tally = counts[row.family]
        tally["tests"] += 1
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"rooflint.{row.family}",
            name=_xml(f"{row.variant}[{row.dtype},{row.shape}]"),
            time=f"{(row.median_ms or 0) / 1e3:.6f}" if row.status == OK else "0",
        )
        if row.status == FAILED:
            tally["failures"] += 1
            ET.SubElement(
                case, "failure", message=_xml(row.message)
            ).text = f"relative error {row.rel_error:.3g} > tolerance {row.tolerance:.3g} against the float64 reference"
        elif row.status == SKIPPED:
            tally["skipped"] += 1
            ET.SubElement(case, "skipped", message=_xml(row.message))
        elif row.status != OK:
            tally["errors"] += 1
            ET.SubElement(case, "error", message=_xml(f"{row.status}: {row.message}"))
    for family, suite in suites.items():
        for key, value in counts[family].items():
            suite.set(key, str(value))
    if not_run > 0:
        suite = ET.SubElement(root, "testsuite", name="rooflint.run", tests="1", failures="0", errors="1", skipped="0")
        case = ET.SubElement(suite, "testcase", classname="rooflint.run", name="interrupted", time="0")
        rows_left = f"{not_run} planned row{'s' if not_run != 1 else ''}"
        ET.SubElement(case, "error", message=f"the run was stopped (Ctrl-C or SIGTERM) before {rows_left} ran")
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # whole or not at all: written in place, a run stopped midway left a cut-short file that no
        # CI could parse, in the place of the last run's whole one
        with replacing(path, binary=True) as handle:
            ET.ElementTree(root).write(handle, encoding="utf-8", xml_declaration=True)
    except OSError as error:
        raise UserError(f"cannot write JUnit file {path}: {why_not(path, error)}") from None
