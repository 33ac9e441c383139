"""The tables of a model run: kernel sets beside the floor and the baselines, and each phase op by op.

Each table is (title, headers, rows of text cells): the CLI draws them with rich and
model-<config>.md holds them as Markdown, so the terminal and the file always agree.
"""

from __future__ import annotations

import math
from pathlib import Path

from rooflint.core.fmt import fmt
from rooflint.core.paths import write_text
from rooflint.models.attribution import UNATTRIBUTED
from rooflint.models.outcome import ModelOutcome, PhaseResult
from rooflint.models.rows import unit_cost
from rooflint.outputs.results import OK

Table = tuple[str, list[str], list[list[str]]]


def _rate(value: float) -> str:
    if not isinstance(value, float) or not math.isfinite(value):
        return "-"
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def _pct(value: float) -> str:
    return f"{value:.1f}%" if isinstance(value, float) and math.isfinite(value) else "-"


def precision(request) -> str:
    """The run's dtype, and the decode weights' code format where --weights-dtype quantized them: a
    title that said only "bf16" over an int8 run's numbers named the wrong model."""
    return f"{request.dtype}, {request.code_format} decode weights" if request.code_format else request.dtype


def roofs_source(spec) -> str:
    """The spec's name and where its numbers come from, once: a measured spec's name already says
    so ("CPU (measured) (measured)" before)."""
    return spec.name if f"({spec.origin})" in spec.name else f"{spec.name} ({spec.origin})"


def summary_table(outcome: ModelOutcome) -> Table:
    headers = ["kernels", "status", "prefill tok/s", "prefill ms", "% floor", "decode tok/s", "ms/step", "% floor",
               "generate tok/s", "check"]  # fmt: skip
    rows = []
    for result in outcome.sets:
        if result.status != OK:
            rows.append([result.name, result.status, *["-"] * 7, result.message])
            continue
        p, d, g = (result.phases.get(k) for k in ("prefill", "decode", "generate"))
        rows.append(
            [
                result.name,
                result.status,
                _rate(p.tokens_per_s) if p else "-",
                fmt(p.timing.median_ms, 4) if p else "-",
                _pct(p.pct_of_floor) if p else "-",
                _rate(d.tokens_per_s) if d else "-",
                fmt(d.timing.median_ms, 4) if d else "-",
                _pct(d.pct_of_floor) if d else "-",
                _rate(g.tokens_per_s) if g else "-",
                result.check.describe() if result.check else "",
            ]
        )
    for name, phase in outcome.baselines.items():
        kind = phase.phase.name
        cells = [_rate(phase.tokens_per_s), fmt(phase.timing.median_ms, 4), _pct(phase.pct_of_floor)]
        dashes = ["-"] * 3
        rows.append([name, OK, *(cells if kind == "prefill" else dashes), *(cells if kind == "decode" else dashes),
                     _rate(phase.tokens_per_s) if kind == "generate" else "-", "Hugging Face"])  # fmt: skip
    return f"{outcome.family} ({precision(outcome.request)}) on {outcome.spec.name}", headers, rows


def targets_table(outcome: ModelOutcome) -> Table | None:
    """Each set's speed over the HF baselines measured in the same process."""
    base = outcome.baselines
    if not base:
        return None
    rows = []
    for result in outcome.sets:
        if result.status != OK:
            continue
        cells = [result.name]
        for mine, theirs in (("prefill", "hf_compile"), ("prefill", "hf_sdpa"), ("decode", "hf_generate"),
                             ("generate", "hf_generate")):  # fmt: skip
            a, b = result.phases.get(mine), base.get(theirs)
            cells.append(f"{a.tokens_per_s / b.tokens_per_s:.2f}x" if a and b else "-")
        rows.append(cells)
    headers = ["kernels", "prefill / HF compile", "prefill / HF SDPA", "decode / HF generate", "generate / HF generate"]
    return "speed over Hugging Face (tok/s ratios)", headers, rows


def op_table(outcome: ModelOutcome, set_name: str, phase: PhaseResult) -> Table:
    attribution = phase.attribution
    total = attribution.total_ms
    dtype = outcome.request.dtype
    rows = []
    names = list(phase.costs) + [n for n in attribution.ops if n not in phase.costs]
    for op in names:
        timed = attribution.ops.get(op)
        if timed is None or timed.ms <= 0:
            continue
        cost = unit_cost(phase.costs[op], dtype) if op in phase.costs else None
        seconds = timed.ms / 1e3
        top, share = timed.top_kernel()
        if cost is not None:
            from rooflint.core.roofline import analyse

            point = analyse(cost, seconds, outcome.spec, dtype)
            numbers = [fmt(point.achieved_tflops), fmt(point.achieved_gbps, 4), fmt(point.ai_flop_per_byte),
                       _pct(point.pct_of_roof), point.bound]  # fmt: skip
        else:
            numbers = ["-"] * 5
        rows.append([op, fmt(timed.ms, 4), _pct(100 * timed.ms / total), str(timed.calls), *numbers,
                     f"{top[:60]} ({share:.0%})" if top else ""])  # fmt: skip
    if attribution.unattributed_ms > 0:
        rows.append([UNATTRIBUTED, fmt(attribution.unattributed_ms, 4), _pct(100 * attribution.unattributed_ms / total),
                     "", *["-"] * 5, ""])  # fmt: skip
    idle = "GPU idle between kernels" if attribution.mode == "device kernels" else "Python between op ranges"
    rows.append([f"({idle})", fmt(attribution.idle_ms, 4), "", "", *["-"] * 5, "not work: not in the sum"])
    verdict = phase.gap_verdict
    shape = phase.phase
    title = (
        f"{set_name} {shape.name} (B={shape.batch}, T={shape.tokens}, context {shape.context}): "
        f"ops sum {fmt(total, 4)} ms, step {fmt(phase.timing.median_ms, 4)} ms, gap {phase.gap:+.1%} "
        f"({verdict}; {attribution.mode})"
    )
    headers = ["op", "ms", "share", "calls", "TFLOP/s", "GB/s", "FLOP/B", "% roof", "bound", "top kernel"]
    return title, headers, rows


def sweep_table(outcome: ModelOutcome) -> Table:
    """The decode sweep (models/sweep.py): one line per kernel set and (batch, context) point."""
    rows = []
    for point in outcome.sweep:
        if point.status != OK:
            rows.append([point.kernels, str(point.batch), str(point.context), point.status, *["-"] * 5, point.message])
            continue
        rows.append([point.kernels, str(point.batch), str(point.context), point.status, _rate(point.tokens_per_s),
                     fmt(point.ms_per_step, 4), fmt(point.floor_ms, 4), _pct(point.pct_of_floor), point.bound,
                     point.message])  # fmt: skip
    headers = ["kernels", "B", "context", "status", "decode tok/s", "ms/step", "floor ms", "% floor", "floor binds",
               "note"]  # fmt: skip
    return "decode sweep: where the floor turns from memory to compute", headers, rows


def all_tables(outcome: ModelOutcome) -> list[Table]:
    tables = [summary_table(outcome)]
    targets = targets_table(outcome)
    if targets:
        tables.append(targets)
    if outcome.sweep:
        tables.append(sweep_table(outcome))
    for result in outcome.sets:
        for phase in result.phases.values():
            if phase.attribution is not None:
                tables.append(op_table(outcome, result.name, phase))
    return tables


def markdown(outcome: ModelOutcome) -> str:
    lines = [f"# {outcome.family}", ""]
    request = outcome.request
    lines.append(
        f"B={request.batch}, prefill T={request.seq}, prompt {request.prompt} + {request.new_tokens} new tokens, "
        f"{precision(request)}, roofs: {roofs_source(outcome.spec)}"
    )
    for result in outcome.sets:
        if result.plan:
            lines.append(f"- {result.name}: {result.plan}{'; ' + result.note if result.note else ''}")
    for title, headers, rows in all_tables(outcome):
        lines += ["", f"## {title}", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_tables(outcome: ModelOutcome) -> Path:
    path = Path(outcome.request.out) / f"model-{outcome.loaded_name}.md"
    write_text(path, markdown(outcome), "model tables")
    return path
