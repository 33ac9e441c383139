"""scaled_gemm: C[bf16] = (A * sa) @ (B * sb)^T with A [M, K] and B [N, K] quantized (fp8 or int8).

The GEMM of fp8 training and inference: both operands are codes, each with fp32 scales, per tensor
(``scaling=tensor``: one sa, one sb) or per row (``scaling=row``: sa [M, 1] per token, sb [1, N]
per output channel). The tensor cores multiply the codes (fp8 or int8 MMAs, twice the bf16 rate on
Hopper) and accumulate in fp32 (int32 for int8); the scales are applied once per output, in the
epilogue. Dtypes (docs/quantized.md):
- fp8_e4m3: A and B in e4m3 (the forward pass's format);
- fp8_e5m2: A in e5m2, B in e4m3: a gradient times a weight, the backward pass's GEMM (cuBLASLt
  has no e5m2 x e5m2 GEMM, and no framework asks for one);
- int8: A and B in int8, int32 accumulation.
The reference is the float64 product of the dequantized operands: quantization error is the
format's business, not the kernel's, so every variant is held to the bf16 output's tolerance.
"""

from __future__ import annotations

import torch

from rooflint.core.errors import UserError, VariantSkipped
from rooflint.core.family import Cost, Family, randn
from rooflint.kernels.scaled_gemm.formats import SCALE_BYTES, SCALINGS, dequantize64, quantize, scale_count

OUT_BYTES = 2  # C is bf16


def _scaling(params) -> str:
    if params["scaling"] not in SCALINGS:
        raise UserError(f"scaling={params['scaling']!r} for scaled_gemm; valid: {', '.join(SCALINGS)}")
    return params["scaling"]


def make_inputs(params, dtype, device, generator):
    m, k, n, per = params["m"], params["k"], params["n"], _scaling(params)
    a_float = randn([m, k], torch.float32, device, generator)
    # B scaled by 1/sqrt(K), as nn.Linear initialises a weight, keeps C near unit variance.
    b_float = randn([n, k], torch.float32, device, generator) * k**-0.5
    b_dtype = torch.float8_e4m3fn if dtype == torch.float8_e5m2 else dtype
    a, sa = quantize(a_float, dtype, per)
    b, sb = quantize(b_float, b_dtype, per)
    # torch._scaled_mm's layout of row scales: sa [M, 1] and sb [1, N].
    return {"a": a, "b": b, "sa": sa, "sb": sb.reshape(1, n) if per == "row" else sb}


def reference(inputs, params):
    a = dequantize64(inputs["a"], inputs["sa"])
    b = dequantize64(inputs["b"], inputs["sb"].reshape(-1, 1) if inputs["sb"].dim() else inputs["sb"])
    return a @ b.T


def scale_bytes(params) -> int:
    m, k, n, per = params["m"], params["k"], params["n"], _scaling(params)
    return (scale_count(m, k, per) + scale_count(n, k, per)) * SCALE_BYTES


def cost(params, dtype):
    m, k, n = params["m"], params["k"], params["n"]
    return Cost(
        tensor_flops=2 * m * n * k,  # one multiply-add per (row, column, k), on fp8 or int8 MMAs
        cuda_flops=2 * m * n,  # the epilogue: times sa, times sb, per output
        bytes=m * k  # read A (1-byte codes)
        + n * k  # read B (1-byte codes)
        + scale_bytes(params)  # read sa and sb (fp32)
        + m * n * OUT_BYTES,  # write C (bf16)
    )


def unfused_bytes(params, dtype):
    """Dequantizing first: each operand is converted to bf16 (read 1 byte, write 2), scaled in place
    (read 2, write 2) and read by the bf16 GEMM (2); an int8 GEMM's int32 C makes a round trip."""
    m, k, n = params["m"], params["k"], params["n"]
    return cost(params, dtype).bytes + 8 * (m * k + n * k)


def int_mm_bytes(params, dtype):
    """torch._int_mm writes C in int32 (4 bytes); the scaling reads it back before writing bf16."""
    extra = 8 * params["m"] * params["n"] if dtype == "int8" else 0
    return cost(params, dtype).bytes + extra


FAMILY = Family(
    "scaled_gemm",
    summary="C[bf16] = (A_q * sa) @ (B_q * sb)^T, fp8 or int8 codes",
    sizes={
        "small": [{"m": 96, "k": 160, "n": 80, "scaling": "row"}, {"m": 64, "k": 128, "n": 48, "scaling": "tensor"}],
        # The square 8192^3 GEMM (compute-bound at 2.7k FLOP/B: the fp8 roof), in both scalings;
        # and GPT-2's MLP up-projection over 1024 tokens (768 -> 3072), per-row scaled as fp8 inference runs it.
        "large": [
            {"m": 8192, "k": 8192, "n": 8192, "scaling": "tensor"},
            {"m": 8192, "k": 8192, "n": 8192, "scaling": "row"},
            {"m": 1024, "k": 768, "n": 3072, "scaling": "row"},
        ],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
    dtypes=("fp8_e4m3", "fp8_e5m2", "int8"),
)


def _on_cuda_needs_multiples_of_16(case):
    k, n = case.params["k"], case.params["n"]
    if case.device.type == "cuda" and (k % 16 or n % 16):
        raise VariantSkipped("cuBLASLt's fp8 and int8 GEMMs need K and N multiples of 16")


def _first_call(fn, what: str):
    """Call once at build time: a case the library refuses (an old GPU, a scaling it lacks) is a
    skip with the library's own reason, not a failed row."""
    try:
        fn()
    except RuntimeError as error:
        raise VariantSkipped(f"{what} refuses this case: {str(error).splitlines()[0][:160]}") from None
    return fn


@FAMILY.variant("eager", baseline=True, modeled_bytes=int_mm_bytes)
def eager(case):
    """torch._scaled_mm (cuBLASLt, scales in the epilogue); int8: torch._int_mm, then the scales"""
    _on_cuda_needs_multiples_of_16(case)
    a, b, sa, sb = case["a"], case["b"], case["sa"], case["sb"]
    if a.dtype == torch.int8:
        if case.device.type == "cuda" and case.params["m"] <= 16:
            raise VariantSkipped("torch._int_mm needs M > 16 on CUDA")
        return _first_call(lambda: (torch._int_mm(a, b.t()) * sa * sb).to(torch.bfloat16), "torch._int_mm")
    # _scaled_mm takes B column-major: B^T of a row-major [N, K] B is exactly that, with no copy.
    return _first_call(
        lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16), "torch._scaled_mm"
    )


def dequantized_bf16(a, b, sa, sb):
    bt = sb.reshape(-1, 1) if sb.dim() else sb
    return (a.to(torch.bfloat16).mul_(sa)) @ (b.to(torch.bfloat16).mul_(bt)).T


@FAMILY.variant("eager_unfused", modeled_bytes=unfused_bytes)
def eager_unfused(case):
    """dequantize both operands to bf16, then a bf16 GEMM: what a GPU without fp8/int8 MMAs runs"""
    a, b, sa, sb = case["a"], case["b"], case["sa"], case["sb"]
    return lambda: dequantized_bf16(a, b, sa, sb)


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.scaled_gemm import triton  # noqa: E402, F401
