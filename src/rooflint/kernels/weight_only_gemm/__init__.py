"""weight_only_gemm: y[bf16] = x[bf16, M x K] @ dequant(W_q [N, K])^T for a decode step (M <= 16).

At M <= 16 a linear layer is a weight stream (2M FLOPs per weight element read), so storing the
weight in one byte instead of two halves the bytes that set its time. The activations stay bf16
and the weight is dequantized in registers to bf16, so the MMAs are bf16 ones: the roof is the
bf16 peak (core.gpu_spec.QUANTIZED_TENSOR_PRECISIONS), and the win is all on the memory side.
Dtypes (docs/quantized.md): w8a16, int8 codes; wfp8a16, fp8 e4m3 codes. Scales are fp32, one per
output channel (``group=0``) or one per ``group`` consecutive weights of a row (a power of two,
at least 16, dividing K). The reference is the float64 product with the dequantized weight.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rooflint.core.errors import UserError
from rooflint.core.family import Cost, Family, randn
from rooflint.kernels.scaled_gemm.formats import SCALE_BYTES, dequantize64, quantize, scale_count

MAX_ROWS = 16  # the decode rows one MMA tile's N side holds
ACT_BYTES = 2  # x and y are bf16


def _group(params) -> int:
    group, k = params["group"], params["k"]
    if group and (group < 16 or group & (group - 1) or k % group):
        raise UserError(
            f"group={group} for weight_only_gemm must be 0 (per channel) or a power of two >= 16 dividing k={k}"
        )
    if params["m"] > MAX_ROWS:
        raise UserError(f"m={params['m']} for weight_only_gemm: a decode GEMM takes at most {MAX_ROWS} rows")
    return group


def make_inputs(params, dtype, device, generator):
    m, k, n, group = params["m"], params["k"], params["n"], _group(params)
    w_float = randn([n, k], torch.float32, device, generator) * k**-0.5  # nn.Linear's scale
    w_q, w_scale = quantize(w_float, dtype, "row", group)
    return {
        "x": randn([m, k], torch.bfloat16, device, generator),
        "w_q": w_q,
        "w_scale": w_scale,
        # The bf16 model's weight: the same dequantized values, rounded once to bf16, for the
        # bf16 kernels this family is measured against.
        "w_bf16": dequantize64(w_q, w_scale, group).to(torch.bfloat16),
    }


def reference(inputs, params):
    return inputs["x"].double() @ dequantize64(inputs["w_q"], inputs["w_scale"], params["group"]).T


def cost(params, dtype):
    m, k, n, group = params["m"], params["k"], params["n"], _group(params)
    return Cost(
        tensor_flops=2 * m * n * k,  # bf16 MMAs on the dequantized weight
        cuda_flops=m * n * (k // group if group else 1),  # one scale multiply per output and group
        bytes=m * k * ACT_BYTES  # read x (bf16)
        + n * k  # read W (1-byte codes)
        + scale_count(n, k, "row", group) * SCALE_BYTES  # read the scales (fp32)
        + m * n * ACT_BYTES,  # write y (bf16)
    )


def bf16_weight_bytes(params, dtype):
    """A bf16 kernel reads a 2-byte weight and no scales."""
    k, n = params["k"], params["n"]
    return cost(params, dtype).bytes + n * k - scale_count(n, k, "row", params["group"]) * SCALE_BYTES


def dequantize_first_bytes(params, dtype):
    """Dequantizing in PyTorch: the codes become a bf16 W (write 2 bytes), scaled in place (read 2,
    write 2), which F.linear reads (2)."""
    return cost(params, dtype).bytes + 8 * params["n"] * params["k"]


GPT2 = [(768, 2304), (768, 768), (768, 3072), (3072, 768)]  # (K, N): QKV, attention out, MLP up, down
LLAMA_1B = [(2048, 2048), (2048, 512), (2048, 8192), (8192, 2048)]  # q/o, k/v (8 heads x 64), up/gate, down

FAMILY = Family(
    "weight_only_gemm",
    summary="y = x @ dequant(W_q)^T, int8/fp8 weights, bf16 activations, M <= 16",
    sizes={
        # Odd shapes for the Triton kernel (a K tail, a grouped weight), and one that the CUDA kernel,
        # which splits K into 4-16 warps of whole k16 steps, also takes (K = 768: 4 warps of 12 steps).
        "small": [
            {"m": 3, "k": 160, "n": 72, "group": 0},
            {"m": 8, "k": 256, "n": 48, "group": 64},
            {"m": 5, "k": 768, "n": 40, "group": 0},
        ],
        # Every linear of a GPT-2 and a Llama-3.2-1B decode step at 1, 8 and 16 sequences, per
        # channel; and Llama's MLP up-projection with 128-wide groups, the common per-block form.
        "large": [{"m": m, "k": k, "n": n, "group": 0} for k, n in GPT2 + LLAMA_1B for m in (1, 8, 16)]
        + [{"m": 8, "k": 2048, "n": 8192, "group": 128}],
    },  # fmt: skip
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
    dtypes=("w8a16", "wfp8a16"),
    default_dtypes=("w8a16", "wfp8a16"),  # bench without --dtype: both weight formats of a decode
)


def dequantize_bf16(w_q, w_scale, group: int) -> torch.Tensor:
    scale = w_scale.repeat_interleave(group, dim=1) if group else w_scale
    return w_q.to(torch.bfloat16).mul_(scale)


@FAMILY.variant("eager", modeled_bytes=dequantize_first_bytes)
def eager(case):
    """dequantize W to bf16, then F.linear: the PyTorch way, every call"""
    x, w_q, w_scale, group = case["x"], case["w_q"], case["w_scale"], case.params["group"]
    return lambda: F.linear(x, dequantize_bf16(w_q, w_scale, group))


@FAMILY.variant("bf16_linear", kind="eager", baseline=True, modeled_bytes=bf16_weight_bytes)
def bf16_linear(case):
    """F.linear on the bf16 weight (cuBLAS): the unquantized layer"""
    x, w = case["x"], case["w_bf16"]
    return lambda: F.linear(x, w)


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.weight_only_gemm import cuda, triton  # noqa: E402, F401
