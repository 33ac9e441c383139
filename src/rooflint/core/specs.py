"""GPU specifications: the datasheet table, detection of the running GPU, and user spec files."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from rooflint.core.errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# Precisions a tensor core or a CUDA core may run in, as they appear in spec keys.
TENSOR_PRECISIONS = ("tf32", "fp16", "bf16", "fp8")
CUDA_PRECISIONS = ("fp32", "fp16")
NUMBER_FIELDS = (
    ("memory_bandwidth_gbps", "l2_mib", "sm_count", "boost_clock_mhz")
    + tuple(f"tensor_{p}_tflops" for p in TENSOR_PRECISIONS)
    + tuple(f"cuda_{p}_tflops" for p in CUDA_PRECISIONS)
)


@dataclass(frozen=True)
class SpecValue:
    value: float
    source: str
    halved_from_sparse: bool = False
    note: str = ""


@dataclass(frozen=True)
class GpuSpec:
    key: str
    name: str
    values: dict[str, SpecValue]
    match: tuple[str, ...] = ()
    # "datasheet" for the table, "measured" for ceilings measured on this machine (CPU runs,
    # `rooflint ceilings`), "user" for a --spec-file.
    origin: str = "datasheet"
    overrides: dict[str, str] = field(default_factory=dict)  # field -> why it differs from the table

    def get(self, name: str) -> float | None:
        item = self.values.get(name)
        return item.value if item else None

    @property
    def bandwidth_gbps(self) -> float:
        return self.values["memory_bandwidth_gbps"].value

    @property
    def l2_bytes(self) -> int:
        return int(self.get("l2_mib") or 0) * 2**20

    def tensor_peak_tflops(self, precision: str) -> float | None:
        return self.get(f"tensor_{precision}_tflops")

    def cuda_peak_tflops(self, precision: str) -> float | None:
        return self.get(f"cuda_{precision}_tflops")

    def with_device_properties(self, sm_count: int, l2_bytes: int) -> GpuSpec:
        """The device's own SM count and L2 size override the table (cut-down and new SKUs differ)."""
        values = dict(self.values)
        overrides = dict(self.overrides)
        for name, value in (("sm_count", float(sm_count)), ("l2_mib", l2_bytes / 2**20)):
            if value and self.get(name) != value:
                values[name] = SpecValue(value, "read from the device at run time")
                overrides[name] = f"table {self.get(name)}, device {value:g}"
        return replace(self, values=values, overrides=overrides)


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
        try:
            number = float(item["value"])
        except (TypeError, ValueError):
            raise UserError(f"{where}: [{key}] {name} value {item['value']!r} is not a number") from None
        if number <= 0:
            raise UserError(f"{where}: [{key}] {name} must be positive, got {number:g}")
        values[name] = SpecValue(
            number,
            str(item.get("source", where)),
            bool(item.get("halved_from_sparse", False)),
            str(item.get("note", "")),
        )
    unknown = sorted(set(table) - set(NUMBER_FIELDS) - {"name", "match"})
    if unknown:
        raise UserError(f"{where}: [{key}] unknown fields {', '.join(unknown)}; valid: {', '.join(NUMBER_FIELDS)}")
    if "memory_bandwidth_gbps" not in values:
        raise UserError(f"{where}: [{key}] needs memory_bandwidth_gbps")
    if not any(n.endswith("_tflops") for n in values):
        raise UserError(f"{where}: [{key}] needs at least one peak, e.g. cuda_fp32_tflops")
    return GpuSpec(key, str(table.get("name", key)), values, tuple(table.get("match", ())), origin)


def load_table(text: str, origin: str, where: str) -> dict[str, GpuSpec]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{where} is not valid TOML: {error}") from None
    return {key: _parse(key, table, origin, where) for key, table in data.items() if isinstance(table, dict)}


_BUILTIN: dict[str, GpuSpec] | None = None


def builtin_specs() -> dict[str, GpuSpec]:
    global _BUILTIN
    if _BUILTIN is None:
        text = resources.files("rooflint.hardware_specs").joinpath("gpus.toml").read_text()
        _BUILTIN = load_table(text, "datasheet", "hardware_specs/gpus.toml")
    return _BUILTIN


def load_spec_file(path: Path | str) -> dict[str, GpuSpec]:
    """A user's TOML describing GPUs the table lacks, in the same format as hardware_specs/gpus.toml."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"spec file {path} does not exist")
    return load_table(path.read_text(), "user", str(path))


def all_specs(spec_file: Path | str | None = None) -> dict[str, GpuSpec]:
    specs = dict(builtin_specs())
    if spec_file:
        specs.update(load_spec_file(spec_file))
    return specs


def get_spec(name: str, spec_file: Path | str | None = None) -> GpuSpec:
    """Look a GPU up by key (h100_sxm), by a loose alias (h100, H100 SXM) or by device name."""
    specs = all_specs(spec_file)
    wanted = name.strip().lower().replace("-", "_").replace(" ", "_")
    if wanted in specs:
        return specs[wanted]
    aliases = {
        "h100": "h100_sxm",
        "a100": "a100_80gb_sxm",
        "4090": "rtx_4090",
        "a100_40gb": "a100_40gb_sxm",
        "a100_80gb": "a100_80gb_sxm",
        "h200_sxm": "h200",
    }
    if wanted in aliases and aliases[wanted] in specs:
        return specs[aliases[wanted]]
    detected = detect(name, specs)
    if detected:
        return detected
    raise UserError(f"unknown GPU {name!r}; valid: {', '.join(specs)} (or describe it in a TOML file with --spec-file)")


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


def current_gpu_spec(spec_file: Path | str | None = None, gpu: str | None = None) -> GpuSpec:
    """The running GPU's spec with the device's SM count and L2 size applied."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    specs = all_specs(spec_file)
    spec = get_spec(gpu, spec_file) if gpu else detect(props.name, specs)
    if spec is None:
        raise UserError(
            f"GPU {props.name!r} is not in rooflint's table; describe it in a TOML file "
            f"(see hardware_specs/gpus.toml for the format) and pass --spec-file, or name one with --gpu"
        )
    return spec.with_device_properties(props.multi_processor_count, getattr(props, "L2_cache_size", 0))


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
