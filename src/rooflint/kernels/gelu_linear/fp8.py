"""gelu_linear in fp8: Y[bf16] = gelu_tanh((X_q * sx) @ (W_q * sw)^T + b), scaled_gemm's GEMM with the
bias and GELU in its epilogue (docs/quantized.md).

The inputs are quantized as scaled_gemm's per-row form (its make_inputs, scaling=row): X per token
(sx [M, 1]), W per output channel (sw [1, N]), both symmetric absmax; fp8_e4m3 is e4m3 x e4m3,
fp8_e5m2 an e5m2 X times an e4m3 W, as in scaled_gemm. The bias stays bf16 and Y is bf16. The
reference is the float64 GELU of the dequantized product plus the bias: quantization error is the
format's business, so the kernels are held to the bf16 output's tolerance, as every quantized
family is. The tensor-core roof is the fp8 peak (core.gpu_spec.tensor_precision_of).

Variants (fp8 only; the bf16 ones declare their dtypes): ``eager`` (the family's baseline, which
dispatches here) is torch._scaled_mm with the bias in cuBLASLt's epilogue, then F.gelu;
``triton_fp8`` scaled_gemm's Triton kernel with its GELU_BIAS epilogue; ``cuda_fp8`` its CUDA wgmma
kernel (sm_90) with the GELU template flag.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC, NEEDS_TRITON, Cost, randn
from rooflint.engine import cuda_build
from rooflint.kernels import scaled_gemm
from rooflint.kernels.gelu_linear import FAMILY, FP8_DTYPES, GELU_FLOPS
from rooflint.kernels.scaled_gemm.cuda import SCALED_GEMM_HOPPER_CU, cuda_scaled_gemm, why_not
from rooflint.kernels.scaled_gemm.formats import dequantize64, require_fp8_tensor_cores
from rooflint.kernels.scaled_gemm.triton import scaled_gemm as triton_scaled_gemm

BIAS_BYTES = 2  # the bias is bf16
TMA_REASON = "TMA and cuBLASLt's fp8 GEMM need 16-byte row strides: K and N multiples of 16"


def _row_params(params):
    return {**params, "scaling": "row"}


def make_inputs(params, dtype, device, generator):
    """scaled_gemm's per-row quantized operands (x per token, w per output channel), then a bf16 bias."""
    codes = scaled_gemm.make_inputs(_row_params(params), dtype, device, generator)
    bias = randn([params["n"]], torch.bfloat16, device, generator)
    return {"x": codes["a"], "w": codes["b"], "sx": codes["sa"], "sw": codes["sb"], "b": bias}


def reference(inputs, params):
    x = dequantize64(inputs["x"], inputs["sx"])
    w = dequantize64(inputs["w"], inputs["sw"].reshape(-1, 1))
    return F.gelu(F.linear(x, w, inputs["b"].double()), approximate="tanh")


def cost(params, dtype):
    """scaled_gemm's per-row GEMM (1-byte codes, fp32 scales, bf16 Y) plus the bf16 bias read and the
    bias + GELU on the CUDA cores."""
    m, n = params["m"], params["n"]
    gemm = scaled_gemm.cost(_row_params(params), dtype)
    return Cost(
        tensor_flops=gemm.tensor_flops,  # on fp8 MMAs
        cuda_flops=gemm.cuda_flops + m * n * (1 + GELU_FLOPS),  # the scales, then bias add and GELU
        bytes=gemm.bytes + n * BIAS_BYTES,
    )


def _skip_unless_multiples_of_16(case):
    if case.params["k"] % 16 or case.params["n"] % 16:
        raise VariantSkipped(TMA_REASON)


def scaled_mm_gelu(x, w, sx, sw, b):
    # _scaled_mm takes W column-major: W^T of a row-major [N, K] W is exactly that, with no copy.
    y = torch._scaled_mm(x, w.t(), scale_a=sx, scale_b=sw, bias=b, out_dtype=torch.bfloat16)
    return F.gelu(y, approximate="tanh")


def eager(case):
    """The baseline's fp8 form: torch._scaled_mm (cuBLASLt, scales and bias in its epilogue), then F.gelu."""
    if case.device.type == "cuda":
        _skip_unless_multiples_of_16(case)
    x, w, sx, sw, b = case["x"], case["w"], case["sx"], case["sw"], case["b"]
    return scaled_gemm.first_call_or_skip(lambda: scaled_mm_gelu(x, w, sx, sw, b), "torch._scaled_mm")


@FAMILY.variant("triton_fp8", kind="triton", needs=(NEEDS_CUDA, NEEDS_TRITON), dtypes=FP8_DTYPES)
def triton_fp8(case):
    """scaled_gemm's persistent TMA fp8 GEMM with the bias + GELU in its epilogue (GELU_BIAS), autotuned"""
    _skip_unless_multiples_of_16(case)
    require_fp8_tensor_cores(case.device)
    x, w, sx, sw, b = case["x"], case["w"], case["sx"], case["sw"], case["b"]
    out = torch.empty((x.shape[0], w.shape[0]), dtype=torch.bfloat16, device=x.device)
    return lambda: triton_scaled_gemm(x, w, sx, sw, out, gelu_bias=b)


@FAMILY.variant(
    "cuda_fp8",
    kind="cuda",
    needs=(NEEDS_CUDA, NEEDS_NVCC),
    dtypes=FP8_DTYPES,
    sources=(SCALED_GEMM_HOPPER_CU,),
)
def cuda_fp8(case):
    """sm_90 only: scaled_gemm's warp-specialized fp8 wgmma GEMM, scales + bias + GELU in its epilogue"""
    x, w, sx, sw, b = case["x"], case["w"], case["sx"], case["sw"], case["b"]
    reason = why_not(x, w, "row")
    if reason:
        raise VariantSkipped(reason)
    if torch.cuda.get_device_capability(case.device) != (9, 0):
        raise VariantSkipped("the fp8 wgmma GEMM needs an sm_90 GPU (Hopper)")
    library = cuda_build.load(SCALED_GEMM_HOPPER_CU)
    sx, sw = sx.contiguous(), sw.contiguous()
    out = torch.empty((x.shape[0], w.shape[0]), dtype=torch.bfloat16, device=x.device)
    return lambda: cuda_scaled_gemm(library, x, w, sx, sw, out, gelu_bias=b)
