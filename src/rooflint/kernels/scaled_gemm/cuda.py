"""scaled_gemm: the CUDA wgmma fp8 GEMM (scaled_gemm_hopper.cu), scales in its epilogue, sm_90 only."""

from __future__ import annotations

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels.scaled_gemm import FAMILY

SCALED_GEMM_HOPPER_CU = cuda_build.family_source(__file__, "scaled_gemm_hopper")

# The A formats the launcher takes (B is e4m3): wgmma multiplies any pair of e4m3 and e5m2.
A_FORMATS = {torch.float8_e4m3fn: 0, torch.float8_e5m2: 1}
BLOCK_WIDTHS = (0, 128, 256)  # 0: the launcher chooses from the SM count


def why_not(a, b, scaling: str) -> str | None:
    """The reason this kernel cannot take the operands, or None."""
    if a.dtype not in A_FORMATS or b.dtype != torch.float8_e4m3fn:
        return "the CUDA kernel multiplies fp8 (an e4m3 or e5m2 A by an e4m3 B); int8 runs in the triton variant"
    if scaling == "block":
        return "the CUDA kernel scales once per output in its epilogue; per-block scales run in the triton variant"
    if a.shape[1] % 16:
        return "TMA copies rows of 16-byte multiples: K must be a multiple of 16"
    return None


def cuda_scaled_gemm(library, a, b, sa, sb, out, block_n: int = 0, gelu_bias: torch.Tensor | None = None):
    """bf16 (a * sa) @ (b * sb)^T into out [M, N]; sa and sb one each, or sa [M, 1] and sb [1, N].
    With ``gelu_bias`` (bf16 [N]): gelu_tanh((a * sa) @ (b * sb)^T + gelu_bias), in the same epilogue."""
    m, k = a.shape
    if block_n not in BLOCK_WIDTHS:
        raise ValueError(f"block_n={block_n}; valid: {', '.join(map(str, BLOCK_WIDTHS))}")
    row_scales = sa.numel() > 1 or sb.numel() > 1
    n, a_format = b.shape[0], A_FORMATS[a.dtype]
    if gelu_bias is None:
        library.launch("rooflint_scaled_gemm_hopper", a, b, sa, sb, out, m, n, k, a_format, row_scales, block_n)
    else:
        if gelu_bias.dtype != torch.bfloat16 or gelu_bias.shape != (n,):
            raise ValueError(f"gelu_bias must be bf16 [{n}], not {gelu_bias.dtype} {list(gelu_bias.shape)}")
        bias = gelu_bias.contiguous()
        library.launch(
            "rooflint_scaled_gemm_gelu_hopper", a, b, sa, sb, bias, out, m, n, k, a_format, row_scales, block_n
        )
    return out


@FAMILY.variant(
    "cuda",
    needs=(NEEDS_CUDA, NEEDS_NVCC),
    dtypes=("fp8_e4m3", "fp8_e5m2"),
    sources=(SCALED_GEMM_HOPPER_CU,),
)
def cuda_variant(case):
    """sm_90 only: persistent warp-specialized fp8 wgmma GEMM (TMA producer, 2 consumers), scales in the epilogue"""
    if torch.cuda.get_device_capability(case.device) != (9, 0):
        raise VariantSkipped("the fp8 wgmma GEMM needs an sm_90 GPU (Hopper)")
    a, b, sa, sb = case["a"], case["b"], case["sa"], case["sb"]
    reason = why_not(a, b, case.params["scaling"])
    if reason:
        raise VariantSkipped(reason)
    library = cuda_build.load(SCALED_GEMM_HOPPER_CU)
    # The launcher reads one fp32 per row and per column: contiguous [M] and [N] views of the scales.
    sa, sb = sa.contiguous(), sb.contiguous()
    out = torch.empty((a.shape[0], b.shape[0]), dtype=torch.bfloat16, device=a.device)
    return lambda: cuda_scaled_gemm(library, a, b, sa, sb, out)
