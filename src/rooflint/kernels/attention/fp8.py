"""attention in fp8 (e4m3): Q, K and V as codes with one fp32 scale each, O in bf16.

FP8 prefill as FlashAttention-3 runs it on Hopper: the inputs are per-tensor quantized (x = code *
scale; a per-head or per-block scale is a library's own refinement), the tensor cores take the
codes at twice the bf16 rate, and the scales come back in the softmax's scale (sq * sk) and once per
output (sv). The reference is the float64 attention of the dequantized inputs: quantization error
is the format's business, so every variant is held to the bf16 output's tolerance.

The peers on Hopper: FlashAttention-3's fp8 forward (``q_descale``/``k_descale``/``v_descale``).
FlashAttention-4's fp8 forward is Blackwell's (sm_100) only; cuDNN's fp8 SDPA has no PyTorch entry
point (torch 2.11 to 2.13 have no fp8 ``scaled_dot_product_attention``), so it has no row.
"""

from __future__ import annotations

import torch

from rooflint.core.family import Cost, randn
from rooflint.kernels.scaled_gemm.formats import SCALE_BYTES, quantize

FP8_DTYPES = ("fp8_e4m3",)
HALF_DTYPES = ("fp16", "bf16")  # the dtypes of the variants with no fp8 form
OUT_BYTES = 2  # O is bf16
SCALES = ("sq", "sk", "sv")


def is_fp8(dtype) -> bool:
    return dtype in FP8_DTYPES or dtype == torch.float8_e4m3fn


def out_dtype(dtype: torch.dtype) -> torch.dtype:
    """O's dtype for inputs of ``dtype``: bf16 for fp8 codes (OUT_BYTES), else the inputs' own."""
    return torch.bfloat16 if is_fp8(dtype) else dtype


def make_inputs(shape, dtype, device, generator):
    """q, k, v as e4m3 codes of unit-normal values, each with its per-tensor scale (amax / 448)."""
    inputs = {}
    for name, scale in zip(("q", "k", "v"), SCALES):
        values = randn(shape, torch.float32, device, generator)
        codes, inputs[scale] = quantize(values.reshape(-1, shape[-1]), dtype, "tensor")
        inputs[name] = codes.reshape(shape)
    return inputs


def cost(tensor_flops: float, params) -> Cost:
    elements = params["B"] * params["H"] * params["N"] * params["D"]
    return Cost(
        tensor_flops=tensor_flops,  # Q K^T and P V, as in bf16
        bytes=3 * elements  # read the codes of q, k and v (1 byte each)
        + 3 * SCALE_BYTES  # read sq, sk and sv
        + elements * OUT_BYTES,  # write o (bf16)
    )


def dequantize_bytes(params) -> float:
    """What dequantizing first adds: each of q, k, v read as codes (1 byte) and written in bf16
    (2), then read by the bf16 attention (2 instead of 1)."""
    return 3 * params["B"] * params["H"] * params["N"] * params["D"] * (1 + 2 + 1)


def dequantized(case, dtype=torch.bfloat16):
    """q, k, v in ``dtype`` (code * scale; an e4m3 code widens to bf16 exactly, the product rounds once)."""
    return tuple(case[name].to(dtype) * case[scale].to(dtype) for name, scale in zip(("q", "k", "v"), SCALES))
