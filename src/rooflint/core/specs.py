"""GPU specifications: the datasheet table, user spec files, and the one API that hands out a spec.

Where a spec comes from, one function each (nothing else builds one):

- ``get_spec(name, spec_file)``: a GPU by key, alias or device name, from the table or a user's TOML.
- ``current_gpu_spec(spec_file, gpu, roof)``: the GPU this process runs on, with the device's own SM
  count and L2 size and the chosen roof applied. It reads the device through torch, imported only
  when called, so this module stays importable without torch; bench's worker calls it, once.
- ``rooflint.core.roofs.roof_spec(spec, roof)``: the datasheet, or measured ceilings laid over it.
- ``spec_from_rows(gpu, rows, spec_file)``: the ceilings a set of result rows was judged against
  when it was measured (report per GPU, lint per row, plots of results).

``measured_spec`` is the constructor the measuring code (CPU ceilings) uses; ``spec_to_dict`` and
``spec_from_dict`` carry a spec to a worker process.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from rooflint.core.errors import UserError
from rooflint.core.fmt import number, text
from rooflint.core.gpu_spec import CUDA_CORE_PRECISION, NUMBER_FIELDS, GpuSpec, SpecValue
from rooflint.core.gpu_spec import CUDA_PRECISIONS as CUDA_PRECISIONS  # the precisions, named here too
from rooflint.core.gpu_spec import TENSOR_PRECISIONS as TENSOR_PRECISIONS
from rooflint.core.roofs import DEFAULT_ROOF, roof_spec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


# The keys of a field's inline table, as hardware_specs/gpus.toml writes them.
VALUE_KEYS = ("value", "source", "halved_from_sparse", "note")


def _parse(key: str, table: dict[str, Any], origin: str, where: str) -> GpuSpec:
    values = {}
    for name in NUMBER_FIELDS:
        if name not in table:
            continue
        item = table[name]
        if isinstance(item, (int, float)):
            item = {"value": item, "source": where}
        if not isinstance(item, dict) or "value" not in item:
            raise UserError(f'{where}: [{key}] {name} must be a number or {{ value = ..., source = "..." }}')
        # Every value is in the unit its field's name says (GB/s, TFLOP/s, MiB, MHz): a key such as
        # unit = "TB/s" beside it was dropped unread, and 3.35 became a 3.35 GB/s roof.
        stray = sorted(set(item) - set(VALUE_KEYS))
        if stray:
            keys = f"key{'s' if len(stray) > 1 else ''} {', '.join(stray)}"
            raise UserError(
                f"{where}: [{key}] {name} has unknown {keys}; valid: {', '.join(VALUE_KEYS)} "
                "(the value in the unit the field's name says)"
            )
        number = _positive_number(item["value"], f"{where}: [{key}] {name}")
        sparse = item.get("halved_from_sparse", False)
        if not isinstance(sparse, bool):  # bool("no") is True: a quoted flag would halve silently
            raise UserError(f"{where}: [{key}] {name} halved_from_sparse must be true or false, got {sparse!r}")
        if sparse and not name.startswith("tensor_"):
            # Only tensor-core peaks are sold with sparsity; on a bandwidth or a cache size the flag
            # was printed as "(halved from a with-sparsity figure)", a claim about nothing.
            raise UserError(f"{where}: [{key}] {name} cannot be halved_from_sparse; valid: on a tensor_*_tflops peak")
        if name == "sm_count" and number != int(number):  # a count of SMs: 1.5 SMs sized waves on a fraction
            raise UserError(
                f"{where}: [{key}] sm_count {number:g} is not a whole number of SMs; valid: a whole number, e.g. 132"
            )
        values[name] = SpecValue(number, str(item.get("source", where)), sparse, str(item.get("note", "")))
    unknown = sorted(set(table) - set(NUMBER_FIELDS) - {"name", "match"})
    if unknown:
        raise UserError(f"{where}: [{key}] unknown fields {', '.join(unknown)}; valid: {', '.join(NUMBER_FIELDS)}")
    if "memory_bandwidth_gbps" not in values:
        raise UserError(f"{where}: [{key}] needs memory_bandwidth_gbps")
    if not any(n.endswith("_tflops") for n in values):
        raise UserError(f"{where}: [{key}] needs at least one peak, e.g. cuda_fp32_tflops")
    match = _match(table.get("match", []), f"{where}: [{key}]")
    return GpuSpec(key, str(table.get("name", key)), values, match, origin)


# No GPU's bandwidth, peak, cache, clock or SM count comes near either end: a number outside is a typo
# (1e300 for 1e3), and a roofline drawn around it overflows (matplotlib's OverflowError, exit 1).
SPEC_RANGE = (1e-30, 1e30)


def _positive_number(value: Any, what: str) -> float:
    """A finite number above zero: TOML's true is not 1, and inf or nan would make every roof a lie."""
    try:
        number = None if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        number = None
    if number is None:
        raise UserError(f"{what} value {value!r} is not a number")
    if not math.isfinite(number) or number <= 0:
        raise UserError(f"{what} must be a finite positive number, got {number:g}")
    low, high = SPEC_RANGE
    if not low <= number <= high:
        raise UserError(f"{what} {number:g} is past any GPU; valid: a number from {low:g} to {high:g}")
    return number


def _match(patterns: Any, what: str) -> tuple[str, ...]:
    """Device-name substrings. A bare string would be taken letter by letter, matching almost any GPU."""
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p.strip() for p in patterns):
        example = 'e.g. match = ["MI300X"]'
        raise UserError(f"{what} match must be a list of device-name substrings, {example}; got {patterns!r}")
    return tuple(patterns)


def load_table(text: str, origin: str, where: str) -> dict[str, GpuSpec]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{where} is not valid TOML: {error}") from None
    stray = [key for key, table in data.items() if not isinstance(table, dict)]
    if stray:  # a number above the first [gpu] line belongs to no GPU: it would be dropped unread
        raise UserError(f"{where}: {', '.join(stray)} is outside any [gpu] table; put each field under its GPU's [key]")
    return {key: _parse(key, table, origin, where) for key, table in data.items()}


_BUILTIN: dict[str, GpuSpec] | None = None
# Loose names for GPUs of the table (get_spec): alias -> key.
ALIASES = {
    "h100": "h100_sxm",
    "a100": "a100_80gb_sxm",
    "4090": "rtx_4090",
    "a100_40gb": "a100_40gb_sxm",
    "a100_80gb": "a100_80gb_sxm",
    "h200_sxm": "h200",
}


def builtin_specs() -> dict[str, GpuSpec]:
    global _BUILTIN
    if _BUILTIN is None:
        text = resources.files("rooflint.hardware_specs").joinpath("gpus.toml").read_text()
        _BUILTIN = load_table(text, "datasheet", "hardware_specs/gpus.toml")
    return _BUILTIN


def load_spec_file(path: Path | str) -> dict[str, GpuSpec]:
    """A user's TOML describing GPUs the table lacks, in the same format as hardware_specs/gpus.toml."""
    path = Path(path)
    if path.is_dir():  # said as what it is: "does not exist" sent the caller looking for a typo
        raise UserError(f"spec file {path} is a folder; give a TOML file (format: hardware_specs/gpus.toml)")
    if not path.is_file():
        raise UserError(f"spec file {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise UserError(f"spec file {path} is not a TOML text file (byte {error.start} is not UTF-8)") from None
    except OSError as error:
        raise UserError(f"cannot read spec file {path}: {error.strerror or error}") from None
    specs = load_table(text, "user", str(path))
    if not specs:  # an empty file, or comments only: --spec-file was given for nothing
        raise UserError(f"spec file {path} describes no GPU; each is a table: [mygpu] with memory_bandwidth_gbps = ...")
    # get_spec looks a name up in its key form (lower-cased, '-' and ' ' read as '_'): each key is
    # stored in that form, so [MyGPU] is found as MyGPU or mygpu, as a datasheet key is.
    keyed: dict[str, GpuSpec] = {}
    written: dict[str, str] = {}  # key form -> the key as the file wrote it
    for key, spec in specs.items():
        form = _key_form(key)
        if form in keyed:
            raise UserError(f"spec file {path}: [{written[form]}] and [{key}] are one GPU key ({form}); keep one")
        keyed[form], written[form] = dataclasses.replace(spec, key=form), key
    builtin = builtin_specs()
    for form in keyed:
        # A silent replacement of the datasheet would move every roof of that GPU; an alias (h100)
        # is the datasheet GPU's name too, and rows naming it would be judged on the file's numbers.
        own = builtin.get(ALIASES.get(form, form))
        if own is not None:
            named = "rooflint's own" if form in builtin else "an alias of rooflint's own"
            raise UserError(
                f"spec file {path}: [{form}] is {named} {own.name}; a spec file adds GPUs the table "
                f"lacks: give yours another key, e.g. [{form}_custom] (--roof measured judges against measured "
                "ceilings)"
            )
    specs = keyed
    return specs


def _key_form(name: str) -> str:
    """A GPU name as get_spec compares it: lower-cased, '-' and ' ' read as '_'."""
    return name.strip().lower().replace("-", "_").replace(" ", "_")


def check_gpu_flag(gpu: str | None, spec_file: Path | str | None, on_cpu: bool) -> None:
    """--gpu names a GPU of the table (or the spec file): an unknown one is bad input on any device.
    A run on the CPU judges its rows on the CPU's own measured ceilings and stores them as cpu.toml,
    so there --gpu would be silently ignored: refused instead."""
    if gpu is None:
        return
    get_spec(gpu, spec_file)
    if on_cpu:
        raise UserError(
            f"--gpu {gpu} names a GPU, and this run is on the CPU (--device cpu), whose rows and ceilings are "
            "judged against its own measured ones; leave --gpu out, or run on the GPU"
        )


def all_specs(spec_file: Path | str | None = None) -> dict[str, GpuSpec]:
    specs = dict(builtin_specs())
    if spec_file:
        specs.update(load_spec_file(spec_file))
    return specs


def get_spec(name: str, spec_file: Path | str | None = None) -> GpuSpec:
    """Look a GPU up by key (h100_sxm), by a loose alias (h100, H100 SXM) or by device name."""
    specs = all_specs(spec_file)
    wanted = _key_form(name)
    if wanted in specs:
        return specs[wanted]
    if wanted in ALIASES and ALIASES[wanted] in specs:
        return specs[ALIASES[wanted]]
    detected = detect(name, specs)
    if detected:
        return detected
    raise UserError(f"unknown GPU {name!r}; valid: {', '.join(specs)} (or describe it in a TOML file with --spec-file)")


def spec_key(name: str, spec_file: Path | str | None = None) -> str | None:
    """The key of the spec get_spec resolves ``name`` to, or None where it resolves to none: how the
    commands that read results identify one GPU written several ways (h100, h100_sxm, a device name)."""
    try:
        return get_spec(name, spec_file).key
    except UserError:
        return None


def detect(device_name: str, specs: dict[str, GpuSpec] | None = None) -> GpuSpec | None:
    """The spec whose longest `match` substring occurs in the device name ("NVIDIA H100 80GB HBM3")."""
    specs = specs if specs is not None else builtin_specs()
    best: tuple[int, GpuSpec] | None = None
    lowered = device_name.lower()
    for spec in specs.values():
        for pattern in spec.match:
            if pattern.lower() in lowered and (best is None or len(pattern) > best[0]):
                best = (len(pattern), spec)
    return best[1] if best else None


def current_gpu_spec(spec_file: Path | str | None = None, gpu: str | None = None, roof: str | None = None) -> GpuSpec:
    """The running GPU's spec: detected from its name (or named with ``gpu``), with the device's SM
    count and L2 size applied, and ``roof`` ("datasheet", the default, or "measured") laid over it."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    specs = all_specs(spec_file)
    spec = get_spec(gpu, spec_file) if gpu else detect(props.name, specs)
    if spec is None:
        raise UserError(
            f"GPU {props.name!r} is not in rooflint's table; describe it in a TOML file "
            f"(see hardware_specs/gpus.toml for the format) and pass --spec-file, or name one with --gpu"
        )
    spec = spec.with_device_properties(props.multi_processor_count, getattr(props, "L2_cache_size", 0))
    return roof_spec(spec, roof or DEFAULT_ROOF)


def unit_precisions(compute_unit: str, precision: str, dtype: str) -> tuple[str, str]:
    """(tensor-core precision, CUDA-core precision) a result row's FLOPs ran in.

    A row records the precision of its dominant unit only; the other unit takes rooflint's
    convention: tensor cores in the storage dtype, CUDA-core math in fp32.
    """
    tensor = precision if compute_unit == "tensor" and precision else dtype
    cuda = precision if compute_unit == "cuda" and precision else CUDA_CORE_PRECISION
    return tensor, cuda


def _positive(value: Any) -> float | None:
    value = number(value)
    return value if value > 0 else None  # NaN compares false: missing


def spec_from_rows(gpu: str, rows: Iterable[Any], spec_file: Path | str | None = None) -> GpuSpec | None:
    """The ceilings a set of result rows, all measured on ``gpu``, was judged against when measured.

    The one way to rebuild a spec from results: the report uses it per GPU, lint per row. ``rows``
    are ``ResultRow`` objects or records (dicts, e.g. ``DataFrame.to_dict("records")``).

    - Rows judged on the datasheet (``ceiling_source`` "datasheet", or none recorded) of a GPU the
      table knows, or on the entry of ``spec_file`` ("user"): that entry, every number with its source.
    - Otherwise (a CPU run's ceilings measured at its start, ``--roof measured``, a GPU outside the
      table): the ceilings the rows recorded. Bandwidth is the largest ``bandwidth_gbps``; each
      unit's peak is the largest ``tensor_peak_tflops``/``cuda_peak_tflops`` where the file has
      them, else ``peak_tflops`` of rows whose FLOPs ran on that unit alone. Files from before the
      split columns recorded one blended peak for a row that mixes both units; it stands in for
      either unit only where no row gives that unit's own peak (an approximation: without it such
      a row would have no roof at all). ``l2_mib`` comes from ``l2_bytes``. The spec's origin is
      the rows' ``ceiling_source`` ("measured", say), or "recorded" where they differ.
    - None when no row recorded a bandwidth: nothing was timed, so nothing was judged.
    """
    records = [row if isinstance(row, Mapping) else vars(row) for row in rows]
    sources = {text(r.get("ceiling_source")) for r in records} - {""}
    if sources <= {"datasheet", "user"} and gpu not in ("", "cpu"):
        try:
            table = get_spec(gpu, spec_file)
        except UserError:
            table = None  # a GPU outside the table: its rows still carry the ceilings they were judged on
        if table is not None and sources <= {table.origin}:
            return table
    bandwidths = [b for b in (_positive(r.get("bandwidth_gbps")) for r in records) if b]
    if not bandwidths:
        return None
    exact: dict[str, float] = {}
    stand_in: dict[str, float] = {}

    def keep(into: dict[str, float], field: str, value: float) -> None:
        into[field] = max(into.get(field, 0.0), value)

    for record in records:
        unit = text(record.get("compute_unit"))
        tensor, cuda = unit_precisions(unit, text(record.get("precision")), text(record.get("dtype")))
        fields = {"tensor": f"tensor_{tensor}_tflops", "cuda": f"cuda_{cuda}_tflops"}
        split = {name: _positive(record.get(f"{name}_peak_tflops")) for name in ("tensor", "cuda")}
        for name, value in split.items():
            if value:
                keep(exact, fields[name], value)
        peak = _positive(record.get("peak_tflops"))
        if any(split.values()) or not peak:
            continue
        used = [name for name in ("tensor", "cuda") if _positive(record.get(f"{name}_flops"))]
        if len(used) == 2:
            for name in used:
                keep(stand_in, fields[name], peak)
        elif used or unit in fields:
            keep(exact, fields[used[0] if used else unit], peak)
    peaks = {**stand_in, **exact}
    l2_bytes = [b for b in (_positive(r.get("l2_bytes")) for r in records) if b]
    if l2_bytes:
        peaks["l2_mib"] = max(l2_bytes) / 2**20
    origin = sources.pop() if len(sources) == 1 else "recorded"
    how = f"recorded in the results ({origin})"
    values = {"memory_bandwidth_gbps": SpecValue(max(bandwidths), how)}
    values.update({field: SpecValue(value, how) for field, value in peaks.items()})
    names = [text(r.get("device_name")) for r in records if text(r.get("device_name"))]
    return GpuSpec(gpu or "unknown", names[0] if names else gpu or "unknown", values, (), origin)


def measured_spec(key: str, name: str, bandwidth_gbps: float, peaks: dict[str, float], how: str) -> GpuSpec:
    """A spec built from ceilings measured on this machine (CPU runs, `rooflint ceilings`)."""
    values = {"memory_bandwidth_gbps": SpecValue(bandwidth_gbps, how)}
    values.update({name_: SpecValue(v, how) for name_, v in peaks.items()})
    return GpuSpec(key, name, values, (), "measured")


def spec_to_dict(spec: GpuSpec) -> dict[str, Any]:
    """A JSON-able form, to hand a measured spec to bench's worker processes."""
    return {
        "key": spec.key,
        "name": spec.name,
        "origin": spec.origin,
        "values": {k: [v.value, v.source, v.halved_from_sparse, v.note] for k, v in spec.values.items()},
    }


def spec_from_dict(data: dict[str, Any]) -> GpuSpec:
    values = {k: SpecValue(float(v[0]), v[1], bool(v[2]), v[3]) for k, v in data["values"].items()}
    return GpuSpec(data["key"], data["name"], values, (), data["origin"])
