"""The clock_mismatch rule, the one lint rule that reads two rows: a row's speedup against its
family's baseline row timed at another SM clock. clock_mismatch judges one pair;
clock_mismatch_findings finds each row's baseline in a results file and judges them all.
"""

from __future__ import annotations

from rooflint.analysis.lint.findings import Finding, Severity, row_label
from rooflint.core.fmt import finite
from rooflint.outputs.results import OK, ResultRow

# Two rows whose SM clocks are 5% apart: a compute-bound time moves about as much with the clock
# alone, so a speedup between them near 1.0x says as much about the clocks as about the kernels. In
# the burst regime each row runs at the clock its power allows: at the power cap the first row of a
# shape can hold 1,980 MHz and a later one 1,845 (reports/h200 at 8112a9e). In the sustained regime
# the rule stays quiet: there every row runs at the power cap, and the clock a row holds is its own
# kernel's doing (a kernel that does more per cycle draws more power per cycle, so the cap holds it
# to a lower clock), so a speedup between two sustained rows is a fair ratio of work per joule at the
# cap (the sustained H100 run at 58f16dd: `triton_gluon` at 1,620 MHz, cuDNN at 1,770, both at ~690 W:
# 1.000x; docs/perf-notes/attention.md).
CLOCKS_APART = 0.05


def baseline_variant(family: str) -> str | None:
    """The variant a registered family's speedup_vs_eager divides by (None: no such family here)."""
    from rooflint.core.errors import UserError
    from rooflint.core.registry import get_family

    try:
        baseline = get_family(family).baseline
    except UserError:
        return None
    return baseline.name if baseline is not None else None


def clock_mismatch(row: ResultRow, baseline: ResultRow) -> Finding | None:
    """A warning where ``row``'s speedup_vs_eager spans SM clocks CLOCKS_APART or more apart and is
    near enough 1.0x that the clocks alone could account for it."""
    if row is baseline or not finite(row.speedup_vs_eager):
        return None
    if row.regime == baseline.regime == "sustained":  # both at the power cap: the clocks are the kernels'
        return None
    clock, base = row.sm_clock_mhz, baseline.sm_clock_mhz
    if not (finite(clock) and finite(base) and min(clock, base) > 0):
        return None
    apart = max(clock, base) / min(clock, base) - 1
    # Only a speedup the clocks could explain (within twice their gap of 1.0x): 0.05x is the kernels.
    if apart < CLOCKS_APART or abs(row.speedup_vs_eager - 1) > 2 * apart:
        return None
    return Finding(
        Severity.WARNING,
        "clock_mismatch",
        f"timed at {clock:.0f} MHz, its baseline {baseline.variant} at {base:.0f} MHz ({100 * apart:.0f}% "
        f"apart): its {row.speedup_vs_eager:.3f}x says as much about the clocks as about the kernels; hold it "
        "against a row timed at the same clock, or run --regime sustained, where every row runs at the power cap",
        row_label(row),
    )


def clock_mismatch_findings(rows: list[ResultRow]) -> dict[int, Finding]:
    """clock_mismatch for each row of a file whose family's baseline row is in the same file, by index."""
    timed = [(i, row) for i, row in enumerate(rows) if row.status == OK and finite(row.sm_clock_mhz)]
    # Looking a baseline up imports its family (torch, the kernels: ~1 s): only for rows with a clock,
    # so CPU results and plain tables are linted without it.
    names = {family: baseline_variant(family) for family in {row.family for _, row in timed}}

    def case(row: ResultRow) -> tuple:
        return row.family, row.dtype, row.shape, row.gpu

    baselines = {case(row): row for _, row in timed if row.variant == names[row.family]}
    found = {}
    for i, row in timed:
        baseline = baselines.get(case(row))
        finding = clock_mismatch(row, baseline) if baseline is not None else None
        if finding:
            found[i] = finding
    return found
