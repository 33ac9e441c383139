"""lint_file: `rooflint lint` over a whole results file (rooflint's or a plain CSV), each row judged
against --gpu or its own GPU's ceilings, with the two-row clock_mismatch rule added.
"""

from __future__ import annotations

from rooflint.analysis.lint.clock_mismatch_rule import clock_mismatch_findings
from rooflint.analysis.lint.findings import Finding, row_label
from rooflint.analysis.lint.roof import recorded_spec
from rooflint.analysis.lint.row_rules import correctness_findings, lint_row
from rooflint.core.specs import GpuSpec, detect, spec_from_rows
from rooflint.outputs.results import OK, ResultRow

# How the title of `rooflint lint` names a spec's origin (GpuSpec.origin) as ceilings.
_ORIGIN_WORDS = {"user": "--spec-file"}


class Linted(list[tuple[ResultRow, list[Finding]]]):
    """lint_file's answer: (row, findings) for each row, and the ceilings the rows were judged against.

    `rooflint lint` names the ceilings in its title. It named the --roof choice (datasheet by
    default) for every row, though a CPU row, or a GPU the table lacks, is judged against the
    ceilings recorded in the row: measured at the start of its run."""

    def __init__(self) -> None:
        super().__init__()
        self.ceilings: dict[str, set[str]] = {}  # spec origin -> the GPUs (spec keys) of the rows it judged

    def judged(self, spec: GpuSpec) -> None:
        self.ceilings.setdefault(spec.origin, set()).add(spec.key)

    def ceilings_note(self) -> str:
        """The ceilings named for the title: one kind where it judged every row ("datasheet ceilings"),
        else each kind with its GPUs ("datasheet ceilings for h100_sxm, measured ceilings for cpu");
        "" where no row was judged."""
        kinds = sorted(self.ceilings)
        words = [f"{_ORIGIN_WORDS.get(kind, kind)} ceilings" for kind in kinds]
        if len(kinds) == 1:
            return words[0]
        return ", ".join(f"{word} for {', '.join(sorted(self.ceilings[kind]))}" for word, kind in zip(words, kinds))


def lint_file(
    path,
    *,
    gpu: str | None = None,
    spec_file=None,
    roof: str = "datasheet",
    counters=None,
) -> Linted:
    """Lint every row of a results file (rooflint's or a plain CSV) against --gpu or each row's own GPU.

    Without --gpu a row is judged against the spec its gpu column names; a CPU row, or a GPU the
    table lacks, against the ceilings recorded in the row (what bench used when it measured it).
    The answer's ceilings say which were used, for which GPUs.
    """
    from rooflint.analysis.lint_input import read_counters, read_lint_input
    from rooflint.core.errors import UserError
    from rooflint.core.roofs import ROOF_CHOICES, roof_spec
    from rooflint.core.specs import all_specs, get_spec

    if roof not in ROOF_CHOICES:  # checked up front: a file of CPU rows would never ask for a roof
        raise UserError(f"unknown roof {roof!r}; valid: {', '.join(ROOF_CHOICES)}")
    # `--gpu ""` (an unset shell variable) is an unknown GPU, not "each row's own": it must not drop wrong_gpu.
    fixed = roof_spec(get_spec(gpu, spec_file), roof) if gpu is not None else None
    data = read_lint_input(path)
    if not data.rows:
        # A header alone (a run killed before its first row) has nothing to judge: "clean" would pass a CI gate.
        raise UserError(f"no result rows in {path}; lint a results file that holds rows")
    measured = list(data.measured_dram_bytes)
    if counters:
        by_key = read_counters(counters)
        joined = 0
        for i, row in enumerate(data.rows):
            found = by_key.get((row.family, row.variant, row.dtype, row.shape))
            if found is not None:
                measured[i] = found
                joined += 1
        if not joined:  # counters of another run (or none): the rule they enable would pass unapplied
            raise UserError(
                f"--counters {counters}: no row of {path} has counters there (joined on family, variant, dtype "
                "and shape); give the ncu.csv of `rooflint profile --ncu` for these rows"
            )
    specs = all_specs(spec_file)
    cache: dict[str, GpuSpec | None] = {}
    # A timed row that recorded no ceilings of its own (a model run's whole-generation row) is judged
    # against those its run recorded on the same GPU, as the report draws it.
    by_gpu: dict[str, GpuSpec | None] = {}

    def recorded_on(gpu: str) -> GpuSpec | None:
        if gpu not in by_gpu:
            by_gpu[gpu] = spec_from_rows(gpu, [r for r in data.rows if r.gpu == gpu], spec_file)
        return by_gpu[gpu]

    clocks = clock_mismatch_findings(data.rows)  # the one rule that reads two rows: a speedup and its baseline
    out = Linted()
    for i, (row, dram) in enumerate(zip(data.rows, measured)):
        spec = fixed
        if spec is None:
            if not row.gpu and row.status != OK:
                out.append((row, correctness_findings(row)))  # nothing timed (a crash in an older file): no roof needed
                continue
            # A timed row whose gpu cell is empty (the report draws it, under "unknown GPU") is judged
            # against the GPU its device name names, else the ceilings it recorded; one with neither (a
            # plain CSV without a gpu column) has no roof to be judged against.
            gpu = row.gpu
            if not gpu and row.device_name:
                known = detect(row.device_name, specs)
                gpu = known.key if known else ""
            if not gpu:
                spec = recorded_spec(row)
                if spec is None:
                    raise UserError(f"{path}: row {row_label(row)!r} names no gpu; add a gpu column or pass --gpu")
            else:
                if gpu not in cache:
                    try:
                        cache[gpu] = get_spec(gpu, spec_file) if gpu != "cpu" else None
                    except UserError:
                        cache[gpu] = None
                    if cache[gpu] is not None:
                        cache[gpu] = roof_spec(cache[gpu], roof)
                spec = cache[gpu] or recorded_spec(row) or recorded_on(gpu)
            if spec is None and row.status != OK:
                out.append((row, correctness_findings(row)))  # nothing was timed: no ceiling needed
                continue
            if spec is None:
                raise UserError(
                    f"{path}: unknown GPU {row.gpu!r}; valid: {', '.join(specs)}, or describe it with --spec-file"
                )
        out.judged(spec)
        findings = lint_row(row, spec, measured_dram_bytes=dram, spec_by_key=specs)
        out.append((row, findings + [clocks[i]] if i in clocks else findings))
    return out
