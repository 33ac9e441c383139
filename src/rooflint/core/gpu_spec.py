"""What a GPU spec is: its numbers (each with its source), the precisions they are keyed by, and the
CUDA-core precision rooflint's roofline assumes. The data model only, with no table and no roof, so
specs (the table and the API), roofs (measured ceilings) and roofline (the maths) all build on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

# Precisions a tensor core or a CUDA core may run in, as they appear in spec keys.
TENSOR_PRECISIONS = ("tf32", "fp16", "bf16", "fp8", "int8")
# The precision the tensor cores run for a quantized dtype name (rooflint.core.family.DTYPES). Both
# fp8 formats run the one fp8 MMA rate; a weight-only format dequantizes its weights to bf16 in
# registers, so its MMAs are bf16 ones: its roof is the bf16 peak, never the int8 or fp8 one.
QUANTIZED_TENSOR_PRECISIONS = {
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "int8": "int8",
    "w8a16": "bf16",
    "wfp8a16": "bf16",
}
CUDA_PRECISIONS = ("fp32", "fp16")
# CUDA-core work in every rooflint variant (and in PyTorch's own kernels, through opmath) runs in
# fp32 even for fp16/bf16 tensors, so fp32 is the CUDA-core precision whatever the storage dtype.
CUDA_CORE_PRECISION = "fp32"


def tensor_precision_of(dtype: str) -> str:
    """The tensor-core precision a dtype name's matmuls run in: itself unless it is a quantized format."""
    return QUANTIZED_TENSOR_PRECISIONS.get(dtype, dtype)


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
        # Rounded after scaling: int() of the MiB first made a 1.5 MiB L2 1 MiB, and 0.5 MiB none.
        return round((self.get("l2_mib") or 0) * 2**20)

    def tensor_peak_tflops(self, precision: str) -> float | None:
        """The tensor-core peak of a precision, or of the precision a dtype name runs (fp8_e4m3: fp8)."""
        return self.get(f"tensor_{tensor_precision_of(precision)}_tflops")

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
