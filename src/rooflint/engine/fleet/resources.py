"""Dask worker resources that say which GPU a worker holds.

A worker holding one GPU declares ``GPU=1`` and its type, ``gpu-<label>=1`` (``dask worker
--resources "GPU=1,gpu-h100_sxm=1"``). A task asks for ``GPU: 1`` and the type it must run on, so
it holds a whole GPU of that type while it measures. Labels are best rooflint's GPU keys (h100_sxm,
a100_80gb_sxm, h200: ``rooflint doctor`` names this machine's); any word without spaces, commas or
``=`` works.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

from rooflint.core.errors import UserError
from rooflint.core.specs import all_specs, detect, get_spec

GPU = "GPU"
TYPE_PREFIX = "gpu-"
ANY = ""  # the label of a run on workers that declare GPU=1 but no type


def type_resource(label: str) -> str:
    return TYPE_PREFIX + label


def task_resources(label: str) -> dict[str, float]:
    """What one task holds: a whole GPU, of type ``label`` unless it is ANY."""
    return {GPU: 1, type_resource(label): 1} if label != ANY else {GPU: 1}


def offered_labels(workers: dict[str, Any]) -> dict[str, list[str]]:
    """GPU type label -> names of the workers offering it, from the scheduler's worker info."""
    offered: dict[str, list[str]] = {}
    for address, info in workers.items():
        resources = info.get("resources") or {}
        if resources.get(GPU, 0) < 1:
            continue
        labels = [name[len(TYPE_PREFIX) :] for name in resources if name.startswith(TYPE_PREFIX)] or [ANY]
        for label in labels:
            offered.setdefault(label, []).append(str(info.get("name", address)))
    return offered


def choose_labels(wanted: list[str], offered: dict[str, list[str]], spec_file: str | None = None) -> list[str]:
    """The labels to run the whole plan on: each of ``wanted`` (by label, or by the GPU it names:
    ``h100`` finds workers labelled ``h100_sxm``), or every type the cluster offers."""
    hint = 'start each worker with --resources "GPU=1,gpu-<type>=1" (docs/fleet.md)'
    if not offered:
        raise UserError(f"no worker of the cluster offers a GPU: {hint}")
    if not wanted:
        return sorted(offered)
    chosen = []
    for name in wanted:
        match = name if name in offered else None
        if match is None:
            key = _spec_key(name, spec_file)
            match = next((label for label in offered if key and _spec_key(label, spec_file) == key), None)
        if match is None:
            valid = ", ".join(label or "(untyped)" for label in sorted(offered))
            raise UserError(f"--gpu-types {name!r}: no worker offers it; valid: {valid}")
        if match not in chosen:
            chosen.append(match)
    return chosen


def gpu_key(label: str, spec_file: str | None = None) -> str:
    """The rooflint GPU key a label names, or "" (rows a worker never stamped take it)."""
    return _spec_key(label, spec_file) if label != ANY else ""


def label_for(device_name: str, gpu: str | None = None, spec_file: str | None = None) -> str:
    """The label of a GPU of this machine: its rooflint key (``--gpu`` wins), else its name as a word."""
    if gpu:
        return get_spec(gpu, spec_file).key
    spec = detect(device_name, all_specs(spec_file))
    return spec.key if spec else re.sub(r"[^a-z0-9_.]+", "_", device_name.lower()).strip("_")


def _spec_key(name: str, spec_file: str | None) -> str:
    """get_spec's key for ``name``, or "". The client stamps every streamed row with it, so the
    answer is kept per (name, spec file as it is now): one parse of the file per label, not per row."""
    stamp = None
    if spec_file:
        try:
            status = os.stat(spec_file)
            stamp = (status.st_mtime_ns, status.st_size)
        except OSError:
            stamp = None
    return _spec_key_of(name, spec_file, stamp)


@functools.lru_cache(maxsize=256)
def _spec_key_of(name: str, spec_file: str | None, stamp: tuple[int, int] | None) -> str:
    try:
        return get_spec(name, spec_file).key
    except UserError:
        return ""
