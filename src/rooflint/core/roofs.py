"""Which roof a row is judged against: the datasheet, or ceilings `rooflint ceilings` measured.

Measured ceilings are stored per GPU as TOML in the user cache (``<cache>/ceilings/<gpu>.toml``) in
the format of hardware_specs/gpus.toml, plus l2_bandwidth_gbps, which the datasheets do not give.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from rooflint.core import paths
from rooflint.core.errors import UserError
from rooflint.core.gpu_spec import NUMBER_FIELDS, GpuSpec, SpecValue

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# --roof choices. The datasheet is the default: it is the same for every copy of a GPU, so % of
# roof compares across machines and sessions; measured ceilings are opt-in and labelled.
ROOF_CHOICES = ("datasheet", "measured")
DEFAULT_ROOF = "datasheet"
# Fields `rooflint ceilings` stores beside the datasheet's: the L2 copy rate, the two DRAM streams
# memory_bandwidth_gbps is the faster of, and a CPU's fp32 GEMM peak.
MEASURED_ONLY_FIELDS = ("l2_bandwidth_gbps", "copy_bandwidth_gbps", "read_bandwidth_gbps", "tensor_fp32_tflops")


def cache_dir() -> Path:
    """Where `rooflint ceilings` stores <gpu>.toml (see rooflint.core.paths.cache_dir)."""
    return paths.cache_dir("ceilings")


def save_ceilings(
    gpu_key: str, device_name: str, values: dict[str, float], out_dir: Path | None = None, how: str = ""
) -> Path:
    """Write <dir>/<gpu_key>.toml: one [gpu_key] table, each value with where and when it was measured."""
    directory = Path(out_dir) if out_dir else cache_dir()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    source = json.dumps(f"measured by rooflint ceilings on {device_name} at {stamp}{how}")
    lines = [f"# rooflint ceilings measured on {device_name}", f"[{gpu_key}]", f"name = {json.dumps(device_name)}"]
    lines += [f"{name} = {{ value = {value:.6g}, source = {source} }}" for name, value in sorted(values.items())]
    path = directory / f"{gpu_key}.toml"
    paths.write_text(path, "\n".join(lines) + "\n", "ceilings")
    return path


def load_measured_ceilings(gpu_key: str, directory: Path | None = None) -> dict[str, float] | None:
    """Stored measured ceilings for a GPU key (field -> value), or None when none were measured."""
    path = (Path(directory) if directory else cache_dir()) / f"{gpu_key}.toml"
    if not path.is_file():
        return None
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{path} is not valid TOML: {error}; re-run `rooflint ceilings`") from None
    except UnicodeDecodeError:  # a binary file: a ValueError, which would escape as an internal error
        raise UserError(f"{path} is not text (not UTF-8 TOML); re-run `rooflint ceilings`") from None
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror or error}; re-run `rooflint ceilings`") from None
    table = data.get(gpu_key)
    if not isinstance(table, dict):
        raise UserError(f"{path} has no [{gpu_key}] table; re-run `rooflint ceilings`")
    known = (*NUMBER_FIELDS, *MEASURED_ONLY_FIELDS)
    values = {}
    for name, item in table.items():
        if name == "name":
            continue
        # A misspelt field would be skipped by roof_spec, and its datasheet value judged as "measured".
        if name not in known:
            raise UserError(f"{path}: unknown field {name!r}; valid: {', '.join(known)}; re-run `rooflint ceilings`")
        value = item.get("value") if isinstance(item, dict) else item
        # TOML's true is not 1, and nan or inf (both valid TOML) would make every roof a lie.
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise UserError(f"{path}: {name} must be a finite positive number; re-run `rooflint ceilings`")
        values[name] = float(value)
    if not values:  # a table with a name alone: --roof measured would be the datasheet under another label
        raise UserError(f"{path}: [{gpu_key}] holds no measured ceilings; re-run `rooflint ceilings`")
    return values


def roof_spec(spec: GpuSpec, roof: str = DEFAULT_ROOF, directory: Path | None = None) -> GpuSpec:
    """The spec to judge against: the datasheet, or the datasheet with measured ceilings laid over it.

    Fields never measured (e.g. fp8 on a GPU without it) keep their datasheet value, and the spec's
    overrides say which fields came from where.
    """
    if roof not in ROOF_CHOICES:
        raise UserError(f"unknown roof {roof!r}; valid: {', '.join(ROOF_CHOICES)}")
    if roof == "datasheet" or spec.origin == "measured":
        return spec
    measured = load_measured_ceilings(spec.key, directory)
    if measured is None:
        raise UserError(
            f"no measured ceilings for {spec.key}; run `rooflint ceilings` on that GPU or use --roof datasheet"
        )
    values = dict(spec.values)
    overrides = dict(spec.overrides)
    for name, value in measured.items():
        if name in NUMBER_FIELDS:  # l2_bandwidth_gbps has no datasheet counterpart to replace
            old = spec.get(name)
            values[name] = SpecValue(value, "measured by rooflint ceilings")
            overrides[name] = f"datasheet {old:g}, measured {value:g}" if old else f"measured {value:g}"
    return replace(spec, values=values, origin="measured", overrides=overrides)


def measured_overlay(spec: GpuSpec, directory: Path | None = None) -> list[tuple[str, GpuSpec]]:
    """extra_ceilings for plot_roofline: the stored measured ceilings of spec's GPU, if any."""
    if spec.origin == "measured" or load_measured_ceilings(spec.key, directory) is None:
        return []
    return [("measured (rooflint ceilings)", roof_spec(spec, "measured", directory))]
