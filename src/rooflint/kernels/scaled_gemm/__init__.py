"""scaled_gemm: C[bf16] = (A * sa) @ (B * sb)^T with A [M, K] and B [N, K] quantized (fp8 or int8).

The GEMM of fp8 training and inference: both operands are codes, each with fp32 scales, per tensor
(``scaling=tensor``: one sa, one sb), per row (``scaling=row``: sa [M, 1] per token, sb [1, N]
per output channel) or per block (``scaling=block``, DeepSeek-V3's: sa [M, cdiv(K, 128)] per token
and 128-wide K block, sb [cdiv(N, 128), cdiv(K, 128)] per 128 x 128 block of B). The tensor cores
multiply the codes (fp8 or int8 MMAs, twice the bf16 rate on Hopper) and accumulate in fp32 (int32
for int8); per tensor or row, the scales are applied once per output, in the epilogue; per block,
once per output and 128-wide K block, to that block's partial sum. Dtypes (docs/quantized.md):
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
from rooflint.kernels.scaled_gemm.formats import (
    SCALE_BLOCK,
    SCALE_BYTES,
    SCALINGS,
    block_scale_count,
    dequantize64,
    expand_blocks,
    quantize,
    quantize_blocks,
    scale_count,
)

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
    if per == "block":
        a, sa = quantize_blocks(a_float, dtype, 1)  # a token's 128 values of one K block share a scale
        b, sb = quantize_blocks(b_float, b_dtype, SCALE_BLOCK)  # a weight's 128 x 128 block shares one
        return {"a": a, "b": b, "sa": sa, "sb": sb}
    a, sa = quantize(a_float, dtype, per)
    b, sb = quantize(b_float, b_dtype, per)
    # torch._scaled_mm's layout of row scales: sa [M, 1] and sb [1, N].
    return {"a": a, "b": b, "sa": sa, "sb": sb.reshape(1, n) if per == "row" else sb}


def reference(inputs, params):
    a, b, sa, sb = inputs["a"], inputs["b"], inputs["sa"], inputs["sb"]
    if _scaling(params) == "block":
        sa, sb = block_scales_per_element(a, b, sa, sb)
    elif sb.dim():
        sb = sb.reshape(-1, 1)
    return dequantize64(a, sa) @ dequantize64(b, sb).T


def block_scales_per_element(a, b, sa, sb):
    """The block scales as one per element of A [M, K] and of B [N, K]."""
    (m, k), n = a.shape, b.shape[0]
    return expand_blocks(sa, m, k, 1), expand_blocks(sb, n, k, SCALE_BLOCK)


def scale_bytes(params) -> int:
    m, k, n, per = params["m"], params["k"], params["n"], _scaling(params)
    if per == "block":
        return (block_scale_count(m, k, 1) + block_scale_count(n, k, SCALE_BLOCK)) * SCALE_BYTES
    return (scale_count(m, k, per) + scale_count(n, k, per)) * SCALE_BYTES


def scale_flops(params) -> int:
    """Per tensor or row: times sa, times sb, once per output. Per block: for every output and K
    block, sa * sb and a multiply-add of the block's partial sum into the accumulator."""
    m, k, n = params["m"], params["k"], params["n"]
    if _scaling(params) == "block":
        return 3 * m * n * -(-k // SCALE_BLOCK)
    return 2 * m * n


def cost(params, dtype):
    m, k, n = params["m"], params["k"], params["n"]
    return Cost(
        tensor_flops=2 * m * n * k,  # one multiply-add per (row, column, k), on fp8 or int8 MMAs
        cuda_flops=scale_flops(params),
        bytes=m * k  # read A (1-byte codes)
        + n * k  # read B (1-byte codes)
        + scale_bytes(params)  # read sa and sb (fp32)
        + m * n * OUT_BYTES,  # write C (bf16)
    )


def unfused_bytes(params, dtype):
    """Dequantizing first: each operand is converted to bf16 (read 1 byte, write 2), scaled in place
    (read 2, write 2) and read by the bf16 GEMM (2); block scales are first expanded to one fp32 per
    element (written, then read: 8 bytes an element)."""
    m, k, n = params["m"], params["k"], params["n"]
    expanded = 8 * (m * k + n * k) if params["scaling"] == "block" else 0  # block scales, one per element
    return cost(params, dtype).bytes + 8 * (m * k + n * k) + expanded


def int_mm_bytes(params, dtype):
    """torch._int_mm writes C in int32 (4 bytes); the scaling reads it back before writing bf16."""
    extra = 8 * params["m"] * params["n"] if dtype == "int8" else 0
    return cost(params, dtype).bytes + extra


FAMILY = Family(
    "scaled_gemm",
    summary="C[bf16] = (A_q * sa) @ (B_q * sb)^T, fp8 or int8 codes",
    sizes={
        "small": [
            {"m": 96, "k": 160, "n": 80, "scaling": "row"},
            {"m": 64, "k": 128, "n": 48, "scaling": "tensor"},
            {"m": 40, "k": 288, "n": 144, "scaling": "block"},
        ],
        # The square 8192^3 GEMM (compute-bound at 2.7k FLOP/B: the fp8 roof), in the three scalings;
        # and GPT-2's MLP up-projection over 1024 tokens (768 -> 3072), per-row scaled as fp8 inference runs it.
        "large": [
            {"m": 8192, "k": 8192, "n": 8192, "scaling": "tensor"},
            {"m": 8192, "k": 8192, "n": 8192, "scaling": "row"},
            {"m": 8192, "k": 8192, "n": 8192, "scaling": "block"},
            {"m": 1024, "k": 768, "n": 3072, "scaling": "row"},
        ],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
    dtypes=("fp8_e4m3", "fp8_e5m2", "int8"),
    # bench without --dtype: the forward pass's formats, fp8 e4m3 (against torch._scaled_mm) and
    # int8; e5m2, the backward pass's gradient operand, runs when asked for.
    default_dtypes=("fp8_e4m3", "int8"),
)


def _on_cuda_needs_multiples_of_16(case):
    k, n = case.params["k"], case.params["n"]
    if case.device.type == "cuda" and (k % 16 or n % 16):
        raise VariantSkipped("cuBLASLt's fp8 and int8 GEMMs need K and N multiples of 16")


def first_call_or_skip(fn, what: str):
    """Call once at build time: a case the library refuses (an old GPU, a scaling it lacks) is a
    skip with the library's own reason, not a failed row."""
    try:
        fn()
    except (RuntimeError, ValueError) as error:  # torch's CPU build refuses block scales with a ValueError
        raise VariantSkipped(f"{what} refuses this case: {str(error).splitlines()[0][:160]}") from None
    return fn


@FAMILY.variant("eager", baseline=True, modeled_bytes=int_mm_bytes)
def eager(case):
    """torch._scaled_mm (cuBLASLt, scales in the epilogue); int8: torch._int_mm, then the scales"""
    _on_cuda_needs_multiples_of_16(case)
    a, b, sa, sb = case["a"], case["b"], case["sa"], case["sb"]
    if case.params["scaling"] == "block":
        return _blockwise_scaled_mm(a, b, sa, sb)
    if a.dtype == torch.int8:
        if case.device.type == "cuda" and case.params["m"] <= 16:
            raise VariantSkipped("torch._int_mm needs M > 16 on CUDA")
        return first_call_or_skip(lambda: (torch._int_mm(a, b.t()) * sa * sb).to(torch.bfloat16), "torch._int_mm")
    # _scaled_mm takes B column-major: B^T of a row-major [N, K] B is exactly that, with no copy.
    return first_call_or_skip(
        lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16), "torch._scaled_mm"
    )


def _blockwise_scaled_mm(a, b, sa, sb):
    """torch._scaled_mm's (1 x 128, 128 x 128) form: cuBLASLt 12.9+ on sm_90, with the scales laid
    out as cuBLASLt reads them (cublas_block_scales)."""
    if a.dtype == torch.int8:
        raise VariantSkipped("torch has no int8 GEMM with block scales (torch._int_mm takes no scales)")
    scale_a, scale_b = cublas_block_scales(sa, sb)
    return first_call_or_skip(
        lambda: torch._scaled_mm(a, b.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16),
        "torch._scaled_mm with block scales",
    )


def cublas_block_scales(sa: torch.Tensor, sb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """sa [M, L] and sb [cdiv(N, 128), L] (L = cdiv(K, 128)) as torch._scaled_mm passes them to cuBLASLt.

    cuBLASLt reads the 1 x 128 scales of A outer-dim-major: [M, L] with stride (1, M). It reads the
    128 x 128 scales of B K-block-major with each block row's L scales padded to L4 = round_up(L, 4):
    torch's ScaledBlas.cpp (is_blockwise_128x128_scaling, since pytorch#166752) checks scale_b.t()
    as [cdiv(N, 128), L] with stride (L4, 1), torch/_meta_registrations.py (_scaled_mm_v2, 1x128 x
    128x128) and test/test_scaled_matmul_cuda.py (_pad_128x128_scales) state the same pitch. Passed
    unpadded where L % 4 != 0, cuBLASLt reads every block row but the first from the wrong place
    (and past the end): a torch without that check returned garbage (rel err 1.8e4 at K = 1040,
    L = 9). A torch that checks the unpadded pitch refuses the padded view: the row is a skip
    naming torch's reason."""
    blocks_n, blocks_k = sb.shape
    scale_a = sa.t().contiguous().t()
    padded = sb.new_zeros(blocks_n, -(-blocks_k // 4) * 4)  # the pad is never read as a scale
    padded[:, :blocks_k] = sb
    return scale_a, padded[:, :blocks_k].t()  # [L, cdiv(N, 128)], stride (1, L4)


def dequantized_bf16(a, b, sa, sb, blocks: bool = False):
    if blocks:
        sa, sb = block_scales_per_element(a, b, sa, sb)
    elif sb.dim():
        sb = sb.reshape(-1, 1)
    return (a.to(torch.bfloat16).mul_(sa)) @ (b.to(torch.bfloat16).mul_(sb)).T


@FAMILY.variant("eager_unfused", modeled_bytes=unfused_bytes)
def eager_unfused(case):
    """dequantize both operands to bf16, then a bf16 GEMM: what a GPU without fp8/int8 MMAs runs"""
    a, b, sa, sb = case["a"], case["b"], case["sa"], case["sb"]
    blocks = case.params["scaling"] == "block"
    return lambda: dequantized_bf16(a, b, sa, sb, blocks)


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.scaled_gemm import cuda, gluon, triton  # noqa: E402, F401
