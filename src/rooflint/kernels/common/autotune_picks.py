"""Autotune picks kept on disk, per GPU model: a warm run launches the config the first run picked.

Triton's autotuner times every config the first time a process launches a kernel at a new key
(shape arguments and dtypes) and keeps the winner in memory only, so each bench process pays the
timing again: for the attention kernel's seven configs about a second per (N, D, causal, dtype), most
of that family's compile time in a warm `bench`. Triton's own disk cache (``cache_results``) skips
configs with a ``pre_hook``, which the TMA GEMMs need for their descriptors, and keys by the compile
target, which an H100 and an H200 share (sm_90): a home directory shared between the two would hand
one the other's pick. Here a pick is stored as the config's index under the GPU's name, the kernel's
source hash, its config list and Triton's version, so a changed kernel or config list times again.

The pick is the one the autotuner made when it last timed this key on this GPU model: a warm run
measures the same config as the run that filled the cache, instead of a fresh pick that noise can
change between runs. ``ROOFLINT_AUTOTUNE_PICKS=0`` turns the store off (every process times again).
Where a key is timed, its configs are timed again in rounds (autotune_rounds), so that a clock dip
during one config's window does not decide the pick.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from rooflint.core.autotune_tally import PICKS
from rooflint.core.paths import cache_dir, replacing
from rooflint.core.switches import switch
from rooflint.kernels.common import autotune_rounds

ENV = "ROOFLINT_AUTOTUNE_PICKS"


def enabled() -> bool:
    return switch(ENV) is not False


def store_path(device_name: str) -> Path:
    """One JSON file per GPU model under the cache root: {kernel id: {repr(key): config index}}."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", device_name).strip("_") or "gpu"
    return cache_dir("autotune") / f"{name}.json"


def kernel_id(autotuner: Any) -> str:
    """The kernel's name, a hash of its source (with what it calls), its config list and Triton's
    version: a pick is valid only for the same program choosing among the same configs."""
    fn = autotuner.fn
    while hasattr(fn, "fn") and not hasattr(fn, "cache_key"):
        fn = fn.fn
    try:
        from triton import __version__ as version
    except ImportError:  # no Triton: no autotuner launches, but the id stays defined
        version = "none"
    configs = "|".join(str(config) for config in autotuner.configs)
    digest = hashlib.sha256(f"{getattr(fn, 'cache_key', '')}|{configs}|{version}".encode()).hexdigest()
    return f"{getattr(fn, '__name__', 'kernel')}-{digest[:16]}"


def _read(path: Path) -> dict[str, dict[str, int]]:
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):  # none yet, or unreadable: time again and write a fresh one
        return {}
    return stored if isinstance(stored, dict) else {}


def restore(autotuner: Any, device_name: str) -> int:
    """Put the stored picks of this kernel on this GPU model into the autotuner's in-memory cache,
    where it has none for the key. Returns how many it took."""
    if not enabled() or len(autotuner.configs) < 2:
        return 0
    picks = _read(store_path(device_name)).get(kernel_id(autotuner), {})
    taken = 0
    for text, index in picks.items():
        try:
            key = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            continue
        if isinstance(index, int) and 0 <= index < len(autotuner.configs) and key not in autotuner.cache:
            autotuner.cache[key] = autotuner.configs[index]
            taken += 1
    PICKS["hits"] += taken
    return taken


def remember(autotuner: Any, device_name: str) -> int:
    """Store the picks the autotuner made in this process that the file lacks (other processes'
    picks are kept: the file is read again and replaced whole). Returns how many it added."""
    if not enabled() or len(autotuner.configs) < 2:
        return 0
    indexes = {id(config): i for i, config in enumerate(autotuner.configs)}
    path = store_path(device_name)
    stored = _read(path)
    picks = stored.setdefault(kernel_id(autotuner), {})
    added = 0
    for key, config in autotuner.cache.items():
        text = repr(key)
        if text not in picks and id(config) in indexes:
            picks[text] = indexes[id(config)]
            added += 1
    PICKS["misses"] += added
    if added:
        path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(path) as handle:
            json.dump(stored, handle, indent=1, sort_keys=True)
    return added


# (id(autotuner), GPU model) -> the keys known to be in the store: restored from it or written to it.
# A launch compares counts only, so a timed call pays no file access.
_known: dict[tuple[int, str], int] = {}


def launch(autotuner: Any, grid: Any, device: Any, *args: Any, **kwargs: Any) -> Any:
    """``autotuner[grid](*args, **kwargs)`` with the stored picks of ``device``'s GPU model restored
    before this process's first launch of the kernel; a key the autotuner times is timed again in
    rounds (autotune_rounds) and that pick is stored after the launch that made it."""
    name = _device_name(device)
    if name is None or len(autotuner.configs) < 2:
        return autotuner[grid](*args, **kwargs)
    state = (id(autotuner), name)
    if state not in _known:  # this process's first launch: nothing on the hot path after it
        autotune_rounds.install(autotuner)
        restore(autotuner, name)
        _known[state] = len(autotuner.cache)
    result = autotuner[grid](*args, **kwargs)
    if len(autotuner.cache) != _known[state]:
        autotune_rounds.refine(autotuner, next(reversed(autotuner.cache)))  # the key this launch timed
        remember(autotuner, name)
        _known[state] = len(autotuner.cache)
    return result


_names: dict[int, str] = {}


def _device_name(device: Any) -> str | None:
    """The GPU model's name for a CUDA device (looked up once per device index: a launch stays a
    dictionary read); None for the CPU interpreter, where one config runs and nothing is picked."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _names:
        _names[index] = torch.cuda.get_device_name(index)
    return _names[index]
