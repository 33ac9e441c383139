"""Roofline lint: catch benchmark numbers that cannot be true, or cannot mean what they claim.

Each rule looks at one result row against one GPU spec and returns findings (severity, rule, a
one-line explanation). bench stores them in the CSV's `lint` column (format_findings); `rooflint
lint` checks a results file, rooflint's own or a plain CSV described in docs/lint.md, and adds the
one rule that reads two rows: clock_mismatch, a speedup against the family's baseline row timed at
another SM clock.

One module per concern:
- findings: Finding, Severity, and the text of the `lint` column (format_findings);
- roof: the ceilings a row is judged against, the wrong_gpu rule, and where the row sits under its
  roof (roof_position);
- throttle: the boost clock, throttle_reason and shared_gpu_note (a GPU not at its own speed);
- launch_bound: whether a time may be mostly host launches;
- row_rules: lint_row, every rule on one row, and lint_text, the column bench writes;
- clock_mismatch_rule: clock_mismatch, the rule that reads a row and its family's baseline row;
- whole_file: lint_file, `rooflint lint` over a results file.

Imported here are the names used outside the package.
"""

from rooflint.analysis.lint.findings import SEVERITY_ORDER, Finding, Severity, format_findings
from rooflint.analysis.lint.roof import gpu_key, recorded_spec
from rooflint.analysis.lint.row_rules import lint_row, lint_text
from rooflint.analysis.lint.throttle import boost_clock_mhz, shared_gpu_note, throttle_reason
from rooflint.analysis.lint.whole_file import lint_file

__all__ = [
    "SEVERITY_ORDER",
    "Finding",
    "Severity",
    "boost_clock_mhz",
    "format_findings",
    "gpu_key",
    "lint_file",
    "lint_row",
    "lint_text",
    "recorded_spec",
    "shared_gpu_note",
    "throttle_reason",
]
