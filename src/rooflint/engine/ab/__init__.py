"""`rooflint ab`: two or more entries of one kernel family, side by side.

An entry is a variant of the family as installed, at a git ref, or from a file, optionally under one
set of meta-parameters. Each is checked against the float64 reference first (a failing one is
reported and dropped), then the survivors are timed in alternating rounds in the burst and the
sustained regime with NVML energy (rounds.py), and the rounds are summarised with a confidence
interval on each entry's ratio to the first (analysis/ab_stats.py). docs/ab.md is the user's guide.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rooflint.analysis.ab_stats import CONFIDENCE, EntrySummary, Sample, summarize
from rooflint.core.errors import UserError
from rooflint.core.family import shape_label
from rooflint.engine.ab.entries import build_entries
from rooflint.engine.settings import Regime

DEFAULT_ROUNDS = 5
DEFAULT_DTYPE = "bf16"
MIN_ROUNDS = 2  # one round gives no interval: nothing to tell a win from noise


@dataclass(frozen=True)
class AbSettings:
    family: str
    variants: tuple[str, ...] = ()
    refs: tuple[str, ...] = ()
    sources: tuple[Path, ...] = ()
    configs: tuple[str, ...] = ()  # NAME=V1,V2 each; the entries take their cross product
    size: str | None = None  # None: large on a GPU, small on a CPU (as bench)
    dtype: str | None = None  # None: bf16 where the family has it, else its first dtype
    device: str | None = None  # None: cuda when a GPU is visible
    rounds: int = DEFAULT_ROUNDS
    regimes: tuple[Regime, ...] = (Regime.BURST, Regime.SUSTAINED)
    confidence: float = CONFIDENCE
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rounds < MIN_ROUNDS:
            raise UserError(f"--rounds {self.rounds}: an A/B needs {MIN_ROUNDS} or more rounds for an interval")
        # `--regime burst,burst` names one regime: timed twice per round it would count each round
        # twice (wins 4/4 of 2 rounds) and narrow the interval with samples that are not rounds.
        object.__setattr__(self, "regimes", tuple(dict.fromkeys(Regime.parse(r) for r in self.regimes)))
        if not self.regimes:
            raise UserError(f"no regime to time in; valid: {', '.join(r.value for r in Regime)}")


@dataclass
class AbOutcome:
    family: str
    dtype: str
    device: str
    device_name: str
    entries: list[str]
    summaries: list[EntrySummary] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    failures: dict[str, dict[str, str]] = field(default_factory=dict)  # shape -> entry -> why it was dropped
    # shape -> entry -> why: passed its check, then raised while timed; dropped from that shape's rounds
    errors: dict[str, dict[str, str]] = field(default_factory=dict)
    # shape -> entry -> why it skipped itself (a library not installed, a shape it lacks): not timed,
    # and no failure, as a skipped bench row is none
    skips: dict[str, dict[str, str]] = field(default_factory=dict)
    interrupted: bool = False  # Ctrl-C or SIGTERM: the summaries hold the rounds completed before it


def _device_facts(device: str) -> tuple[str, int]:
    """(what the table names the device, the L2 bytes the timer flushes)."""
    import torch

    if device != "cuda":
        return "cpu", 0
    index = torch.cuda.current_device()
    return torch.cuda.get_device_name(index), torch.cuda.get_device_properties(index).L2_cache_size


def run_ab(settings: AbSettings, on_note: Callable[[str], None] = lambda message: None) -> AbOutcome:
    """Check, time and summarise every entry at every shape of ``settings.size``."""
    from rooflint.engine import nvml
    from rooflint.engine.bench import check_shapes_fit
    from rooflint.engine.device import resolve_device
    from rooflint.engine.worker import missing_requirement

    device = resolve_device(settings.device)
    with tempfile.TemporaryDirectory(prefix="rooflint-ab-") as work:
        entries = build_entries(
            settings.family, settings.variants, settings.refs, settings.sources, settings.configs, workdir=Path(work)
        )
        family = entries[0].source.family
        # None is the default; an empty --dtype (an unset shell variable) is refused below with the
        # valid ones, as profile refuses it, not run as the default the caller did not name.
        dtype = settings.dtype
        if dtype is None:
            dtype = DEFAULT_DTYPE if DEFAULT_DTYPE in family.dtypes else family.dtypes[0]
        if dtype not in family.dtypes:
            raise UserError(f"{family.name} has no dtype {dtype!r}; valid: {', '.join(family.dtypes)}")
        for entry in entries:
            reason = missing_requirement(entry.variant, device)
            if reason:
                raise UserError(f"entry {entry.label} {reason}; this run is on {device}")
            if entry.variant.dtypes and dtype not in entry.variant.dtypes:
                raise UserError(f"entry {entry.label} has no {dtype}; valid: {', '.join(entry.variant.dtypes)}")
        cases = family.cases(settings.size if settings.size is not None else ("large" if device == "cuda" else "small"))
        check_shapes_fit(family, dtype, cases, device)  # before any entry is built or timed
        device_name, l2_bytes = _device_facts(device)
        sampler = nvml.sampler_for(device)
        labels = [entry.label for entry in entries]
        outcome = AbOutcome(family.name, dtype, device, device_name, labels)
        try:
            for preset, params in cases:
                if not _check_and_time(
                    entries, preset, params, dtype, device, settings, sampler, l2_bytes, outcome, on_note
                ):
                    break
        except KeyboardInterrupt:  # while a shape's entries were checked: the shapes timed before it are kept
            outcome.interrupted = True
    outcome.summaries = summarize(outcome.samples, settings.confidence, order=labels)
    return outcome


def _check_and_time(entries, preset, params, dtype, device, settings, sampler, l2_bytes, outcome, on_note) -> bool:
    """Check every entry at one shape and time those that pass into ``outcome``; False when Ctrl-C
    stopped the rounds (the rounds completed before it are kept)."""
    from rooflint.engine.ab.rounds import checked_calls, time_rounds

    calls, failed, skipped = checked_calls(entries, preset, params, dtype, device, settings.seed)
    shape = shape_label(params)
    if skipped:
        outcome.skips[shape] = skipped
        for label, why in skipped.items():
            on_note(f"{shape}: {label} skipped, not timed: {why}")
    if failed:
        outcome.failures[shape] = failed
        for label, why in failed.items():
            on_note(f"{shape}: {label} dropped, not timed: {why}")
    if len(calls) < 2:
        on_note(f"{shape}: {len(calls)} entry passed its check; nothing to compare, not timed")
        return True
    timed = time_rounds(
        calls,
        shape=shape,
        rounds=settings.rounds,
        regimes=settings.regimes,
        device=device,
        sampler=sampler,
        l2_bytes=l2_bytes,
        on_round=lambda r: on_note(f"{shape}: round {r + 1}/{settings.rounds} timed"),
    )
    if timed.failed:
        outcome.errors[shape] = timed.failed
        for label, why in timed.failed.items():
            on_note(f"{shape}: {label} dropped: {why}")
    if len(calls) - len(timed.failed) < 2:
        on_note(f"{shape}: {len(calls) - len(timed.failed)} entry timed to the end; nothing to compare")
    else:
        outcome.samples += timed.samples
    if timed.interrupted:
        outcome.interrupted = True
    return not timed.interrupted
