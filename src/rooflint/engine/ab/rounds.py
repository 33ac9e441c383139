"""The measuring half of an A/B: check every entry against the float64 reference (an entry that
fails is reported and dropped, never timed), then time the survivors in alternating rounds.

In each round every entry is timed once in each regime, by the bench's own timer (timer.measure:
burst with the start state and flushed calls, sustained after a heat-up, the wall clock on a CPU)
with NVML sampling, so a clock that drifts over the minutes an A/B takes slows every entry alike
rather than the ones timed last. The entries' order rotates by one each round, so none is always
timed first after the sustained regime's heat-up, or always right after a given neighbour.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from rooflint.analysis.ab_stats import Sample
from rooflint.core.errors import UserError, VariantSkipped, describe
from rooflint.engine.ab.entries import Entry
from rooflint.engine.correctness import check
from rooflint.engine.nvml import Sampler, Telemetry
from rooflint.engine.settings import Regime
from rooflint.engine.throttle import energy_per_call_j
from rooflint.engine.timer import measure


def checked_calls(
    entries: Sequence[Entry], preset: str, params: dict[str, Any], dtype: str, device: str, seed: int
) -> tuple[dict[str, Callable[[], Any]], dict[str, str], dict[str, str]]:
    """(label -> call) for the entries whose output matches their family's float64 reference at
    this shape, in entry order; (label -> why) for those that failed it or raised; and (label ->
    why) for those that skipped themselves (they cannot run here: no failure). Entries of one family share one
    case (inputs) and one reference; a ref's or a file's copy of the family builds its own, from
    the same seed."""
    passed, failed, skipped = {}, {}, {}
    groups: dict[int, list[Entry]] = {}
    for entry in entries:
        groups.setdefault(id(entry.source.family), []).append(entry)
    for group in groups.values():
        family = group[0].source.family
        try:
            case = family.build_case(preset, params, dtype, torch.device(device), seed=seed)
            with torch.no_grad():
                reference = family.reference(case.inputs, params)
        except UserError:  # a shape the family refuses (its check): bad input, said as before
            raise
        except VariantSkipped as why:
            skipped.update((entry.label, str(why)) for entry in group)
            continue
        except Exception as error:  # noqa: BLE001 - out of memory at a larger shape, a copy's broken reference
            # the group's entries fail at this shape: raised here, it ended the A/B and lost the
            # rounds of the shapes timed before it
            failed.update(
                (entry.label, f"its inputs or float64 reference raised: {describe(error)}") for entry in group
            )
            continue
        for entry in group:
            try:
                call = entry.build(case)
                verdict = check(family, dtype, call(), reference)
            except VariantSkipped as why:  # cannot run here (a library not installed, a shape it lacks): no failure
                skipped[entry.label] = str(why)
                continue
            except Exception as error:  # a config the kernel cannot compile, a broken old source
                failed[entry.label] = describe(error)
                continue
            if verdict.passed:
                passed[entry.label] = call
            else:
                failed[entry.label] = verdict.message
        del reference
        gc.collect()
    order = [entry.label for entry in entries]
    return dict(sorted(passed.items(), key=lambda item: order.index(item[0]))), failed, skipped


def mean_power_w(telemetry: Telemetry) -> float:
    """The board's mean power over a timed window, from the energy counter; NVML's median of its
    power readings where the counter read nothing. The counter is exact over the window; the
    readings come a few per window at an A/B's call lengths, and lag the load."""
    energy, window = telemetry.energy_j, telemetry.window_s
    if math.isfinite(energy) and math.isfinite(window) and window > 0:
        return energy / window
    return telemetry.power_median_w


@dataclass
class Rounds:
    """What time_rounds timed: the samples of the rounds every surviving entry completed, (label ->
    why) for the entries that raised while timed, and whether Ctrl-C (or SIGTERM) stopped it."""

    samples: list[Sample] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    interrupted: bool = False


def time_rounds(
    calls: dict[str, Callable[[], Any]],
    *,
    shape: str,
    rounds: int,
    regimes: Sequence[Regime],
    device: str,
    sampler: Sampler,
    l2_bytes: int,
    on_round: Callable[[int], None] = lambda r: None,
) -> Rounds:
    """``rounds`` rounds; in each, every call timed once per regime, the order rotated each round.

    An entry whose call raises while timed (a later call that fails where the checked first one
    passed) is dropped from every round, since the rounds pair up, and the others keep being timed.
    Ctrl-C keeps the rounds completed before it; the round it stopped is dropped."""
    labels = list(calls)
    done = Rounds()
    try:
        for r in range(rounds):
            order = labels[r % len(labels) :] + labels[: r % len(labels)]
            this_round = []
            for regime in regimes:
                for label in order:
                    if label in done.failed:
                        continue
                    try:
                        timing = measure(calls[label], device=device, regime=regime, sampler=sampler, l2_bytes=l2_bytes)
                    except Exception as error:  # noqa: BLE001 - one broken entry must not lose the others' rounds
                        done.failed[label] = f"raised while timed (round {r + 1}, {regime}): {describe(error)}"
                        continue
                    telemetry = timing.telemetry or Telemetry()
                    this_round.append(
                        Sample(
                            shape,
                            str(regime),
                            r,
                            label,
                            timing.median_ms,
                            energy_per_call_j(timing),
                            telemetry.sm_clock_mhz,
                            mean_power_w(telemetry),
                        )
                    )
            done.samples += this_round
            on_round(r)
    except KeyboardInterrupt:
        done.interrupted = True
    done.samples = [sample for sample in done.samples if sample.entry not in done.failed]
    return done
