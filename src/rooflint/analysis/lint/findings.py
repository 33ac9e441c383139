"""What lint hands back: a Finding is one rule's verdict on one row (its Severity, the rule's name, a
one-line explanation and the row's label), and format_findings writes a row's findings as the text of
the CSV's `lint` column, most severe first.
"""

from __future__ import annotations

from dataclasses import dataclass

from rooflint.outputs.results import ResultRow


class Severity:
    """How bad a finding is (a result row's status is another thing: rooflint.outputs.results)."""

    ERROR = "error"  # the number cannot be true, or is not what it claims: `rooflint lint` exits 1
    WARNING = "warning"  # the number may not mean what it seems
    INFO = "info"


SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass(frozen=True)
class Finding:
    severity: str
    rule: str
    message: str
    row: str = ""  # the row's label: family/variant dtype shape

    def short(self) -> str:
        return f"{self.severity}:{self.rule}"


def row_label(row: ResultRow) -> str:
    parts = [p for p in (row.family, row.variant) if p]
    label = "/".join(parts)
    return " ".join(p for p in (label, row.dtype, row.shape) if p)


def format_findings(findings: list[Finding]) -> str:
    """The CSV `lint` column: "error:above_roof; warning:noisy" (most severe first)."""
    ordered = sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity])
    return "; ".join(f.short() for f in ordered)
