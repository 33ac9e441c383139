"""The quantized formats' numbers: how a float tensor becomes codes and scales, and what the scales weigh.

Symmetric absmax quantization, the form cuBLASLt's scaled GEMMs and weight-only kernels consume:
code = x / scale rounded into the format, scale = amax / the format's largest finite value, over
the whole tensor, each row (a GEMM's per-row / per-output-channel form), each group of
``group`` consecutive elements of a row (per-block along K), or each block of rows x columns
(DeepSeek-V3's fp8 GEMM: activations per 1 x 128, weights per 128 x 128). Scales are fp32, 4 bytes
each; the dequantized value is code * scale, which is what every float64 reference multiplies.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rooflint.core.errors import UserError, VariantSkipped

# The largest finite value of each code format: e4m3fn stops at 448 (no infinities), e5m2 at 57344;
# int8 uses the symmetric range [-127, 127], so that -x quantizes to -code.
QMAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0, torch.int8: 127.0}
SCALE_BYTES = 4  # fp32 scales
# per tensor; per row of A and per row of B (= output channel); per block (A 1 x 128, B 128 x 128)
SCALINGS = ("tensor", "row", "block")
SCALE_BLOCK = 128  # the K width of a block scale, and the rows of a weight's block


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
    scale = _scale_of(amax, dtype)
    expanded = scale.repeat_interleave(group, dim=1) if group and per == "row" else scale
    return _encode(x, expanded, dtype), scale.contiguous()


def quantize_blocks(x: torch.Tensor, dtype: torch.dtype, block_rows: int, block_cols: int = SCALE_BLOCK):
    """(codes in ``dtype``, fp32 scales [cdiv(rows, block_rows), cdiv(K, block_cols)]) of fp32 ``x``
    [rows, K], one scale per block_rows x block_cols block; the last blocks are ragged where the
    block does not divide the shape (their amax is over the elements that exist)."""
    if dtype not in QMAX:
        raise ValueError(f"no quantized format for {dtype}")
    x = x.float()
    rows, k = x.shape
    padded = F.pad(x, (0, -k % block_cols, 0, -rows % block_rows))  # zeros never raise an amax
    blocks = padded.reshape(padded.shape[0] // block_rows, block_rows, padded.shape[1] // block_cols, block_cols)
    scale = _scale_of(blocks.abs().amax(dim=(1, 3)), dtype)
    return _encode(x, expand_blocks(scale, rows, k, block_rows, block_cols), dtype), scale.contiguous()


def expand_blocks(scale: torch.Tensor, rows: int, k: int, block_rows: int, block_cols: int = SCALE_BLOCK):
    """Block scales [cdiv(rows, block_rows), cdiv(K, block_cols)] as one scale per element [rows, K]."""
    return scale.repeat_interleave(block_rows, dim=0).repeat_interleave(block_cols, dim=1)[:rows, :k]


def block_scale_count(rows: int, k: int, block_rows: int, block_cols: int = SCALE_BLOCK) -> int:
    """How many fp32 scales one [rows, K] operand carries with one per block_rows x block_cols block."""
    return -(-rows // block_rows) * -(-k // block_cols)


def _scale_of(amax: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (amax / QMAX[dtype]).clamp(min=torch.finfo(torch.float32).tiny)


def _encode(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round x / scale into the format: to nearest, saturating at the largest finite code. The
    quotient is taken in float64: in fp32 its own rounding can land a value just short of half a
    step on the half (123.49999997 -> 123.5), and round-half-to-even then moves it a whole half step
    plus that ulp away."""
    scaled = x.double() / scale.double()
    if dtype == torch.int8:
        return scaled.round().clamp(-127, 127).to(torch.int8)
    return scaled.clamp(-QMAX[dtype], QMAX[dtype]).to(dtype)


def require_fp8_tensor_cores(device: torch.device) -> None:
    """Skip, with the reason, on a GPU whose tensor cores take no fp8 codes (before Ada, sm_89); the
    CPU interpreter widens the codes, so it takes them."""
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 9):
        raise VariantSkipped("fp8 tensor cores need sm_89 or newer")


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
