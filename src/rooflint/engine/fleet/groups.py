"""The plan cut into Dask tasks: small groups of one case's variants, the longest first.

A case is one family at one dtype and one shape: its variants share the inputs and the float64
reference, which a measuring process builds once for as many of them as run there in a row. One task
per case (the first fleets) leaves a fleet waiting on its largest case: attention's variants alone
outlast everything else. One task per variant would build each case's inputs and reference once per
variant. So a case is cut into as many groups as its share of the run asks for, and never into
groups so small that rebuilding the inputs and reference would be more than a third of a group's
time (``MIN_WORK_PER_SETUP``). Within a case the variants are dealt to its groups longest first, each
to the lightest group, so the groups come out about even; the baseline goes to the first group.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

from rooflint.core.registry import get_family
from rooflint.engine.worker import Task
from rooflint.outputs.results import ResultRow

# Groups per worker of a GPU type, over the whole run: enough that the last groups to finish are
# short, so no GPU idles long while another finishes a large one.
GROUPS_PER_WORKER = 4
MIN_WORK_PER_SETUP = 3.0  # a group measures at least this many times its case's setup


@dataclass(frozen=True)
class Group:
    """One Dask task: variants of one case, in plan order, and the seconds they are expected to take."""

    tasks: tuple[Task, ...]
    seconds: float

    @property
    def name(self) -> str:
        first = self.tasks[0]
        variants = "+".join(task.variant for task in self.tasks)
        return f"{first.family}/{first.dtype}/{first.key.rsplit('/', 1)[-1]}/{variants}"


def case_key(task: Task) -> tuple[str, str, str, str]:
    return (task.family, task.dtype, task.size, json.dumps(task.params, sort_keys=True))


def plan_groups(tasks: list[Task], seconds: Callable[[Task], float], workers: int) -> list[Group]:
    """The tasks cut into groups for ``workers`` GPUs, longest first (``seconds`` estimates each task).

    Equal estimates keep plan order, so a run without a duration table is still reproducible.
    """
    cases: dict[tuple[str, str, str, str], list[Task]] = {}
    for task in tasks:
        cases.setdefault(case_key(task), []).append(task)
    total = sum(seconds(task) for task in tasks)
    target = total / (max(1, workers) * GROUPS_PER_WORKER)
    groups: list[Group] = []
    for case_tasks in cases.values():
        groups += split_case(case_tasks, seconds, target)
    order = {task.key: index for index, task in enumerate(tasks)}
    return sorted(groups, key=lambda group: (-group.seconds, order[group.tasks[0].key]))


def split_case(tasks: list[Task], seconds: Callable[[Task], float], target: float) -> list[Group]:
    """One case's variants in about ``target``-second groups, each paying the case's setup again."""
    family = get_family(tasks[0].family)
    baseline = next((task for task in tasks if task.variant == getattr(family.baseline, "name", None)), None)
    # The baseline runs first in its case, so its measured seconds hold the inputs and reference too.
    setup = seconds(baseline) if baseline is not None else 0.0
    work = sum(seconds(task) for task in tasks)
    size = max(target, MIN_WORK_PER_SETUP * setup)
    count = max(1, min(len(tasks), math.ceil(work / size) if size > 0 else 1))
    if count == 1:
        return [Group(tuple(tasks), work)]
    bins: list[list[Task]] = [[] for _ in range(count)]
    loads = [setup] * count  # every group but the baseline's builds the case again
    if baseline is not None:
        bins[0].append(baseline)
        loads[0] = seconds(baseline)
    for task in sorted((t for t in tasks if t is not baseline), key=seconds, reverse=True):
        lightest = min(range(count), key=lambda index: loads[index])
        bins[lightest].append(task)
        loads[lightest] += seconds(task)
    order = {task.key: index for index, task in enumerate(tasks)}
    return [
        Group(tuple(sorted(members, key=lambda t: order[t.key])), load)
        for members, load in zip(bins, loads, strict=True)
        if members
    ]


def row_order(tasks: list[Task]) -> Callable[[ResultRow], tuple[int, str]]:
    """The sort key of a fleet's rows: their place in the plan, as a one-GPU run writes them (they
    land as they finish), then the GPU type, so each row of a run over several types sits beside
    the same row on the others."""
    order = {task.key: index for index, task in enumerate(tasks)}

    def key(row: ResultRow) -> tuple[int, str]:
        return order.get(f"{row.family}/{row.variant}/{row.dtype}/{row.shape}", len(order)), row.gpu

    return key
