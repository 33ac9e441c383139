"""The quantized formats' numbers: how a float tensor becomes codes and scales, and what the scales weigh.

Symmetric absmax quantization, the form cuBLASLt's scaled GEMMs and weight-only kernels consume:
code = x / scale rounded into the format, scale = amax / the format's largest finite value, over
the whole tensor, each row (a GEMM's per-row / per-output-channel form), or each group of
``group`` consecutive elements of a row (per-block along K). Scales are fp32, 4 bytes each; the
dequantized value is code * scale, which is what every float64 reference multiplies.
"""

from __future__ import annotations

import torch

from rooflint.core.errors import UserError

# The largest finite value of each code format: e4m3fn stops at 448 (no infinities), e5m2 at 57344;
# int8 uses the symmetric range [-127, 127], so that -x quantizes to -code.
QMAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0, torch.int8: 127.0}
SCALE_BYTES = 4  # fp32 scales
SCALINGS = ("tensor", "row")  # per tensor; per row of A and per row of B (= output channel)


def quantize(x: torch.Tensor, dtype: torch.dtype, per: str = "tensor", group: int = 0):
    """(codes in ``dtype``, fp32 scales) of fp32 ``x`` [rows, K]: scales are one 0-dim tensor
    (per="tensor"), [rows, 1] (per="row"), or [rows, K / group] (per="row" with ``group``)."""
    if dtype not in QMAX:
        raise ValueError(f"no quantized format for {dtype}")
    x = x.float()
    if per == "tensor":
        amax = x.abs().amax()
    elif group:
        rows, k = x.shape
        if k % group:
            raise UserError(f"group={group} must divide k={k}")
        amax = x.abs().reshape(rows, k // group, group).amax(dim=2)
    else:
        amax = x.abs().amax(dim=1, keepdim=True)
    scale = (amax / QMAX[dtype]).clamp(min=torch.finfo(torch.float32).tiny)
    expanded = scale.repeat_interleave(group, dim=1) if group and per == "row" else scale
    scaled = x / expanded
    if dtype == torch.int8:
        codes = scaled.round().clamp(-127, 127).to(torch.int8)
    else:
        codes = scaled.clamp(-QMAX[dtype], QMAX[dtype]).to(dtype)
    return codes, scale.contiguous()


def dequantize64(codes: torch.Tensor, scale: torch.Tensor, group: int = 0) -> torch.Tensor:
    """The float64 values codes * scale stand for (the references' operands)."""
    scale = scale.double()
    if group:
        scale = scale.repeat_interleave(group, dim=1)
    return codes.double() * scale


def scale_count(rows: int, k: int, per: str, group: int = 0) -> int:
    """How many fp32 scales one quantized [rows, K] operand carries."""
    if per == "tensor":
        return 1
    return rows * (k // group if group else 1)
