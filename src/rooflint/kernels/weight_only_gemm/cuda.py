"""weight_only_gemm: the CUDA decode GEMM of cuda.cu beside it, the codes held in registers across the
PDL wait (sm_90), as the bf16 decode GEMM's held kernel (kernels/gelu_linear/skinny_pdl.cu) holds bf16.

A block owns 16 W rows and its warps split K, each warp's share of the codes loaded before the wait
for the previous kernel; int8 and e4m3 codes become bf16 by integer and bf16x2 instructions (2 and
2.5 a code), the MMAs are bf16 ones, and the per-channel scale multiplies each output once. Bias, a
GELU and a residual add are fused, so a Llama decode step's o and down projections add their residual
in the GEMM; ``codes_swiglu`` runs a Llama MLP's gate/up projection with silu(gate) * up in the
epilogue, each block holding the gate and the up rows of its 16 outputs, and ``codes_qkv_rope`` a
QKV projection with RoPE and the paged K/V append in it, each block holding 8 rows of a head's first
half and their rotate-half partners. Per-channel scales only: a
grouped weight runs on the Triton kernel.
"""

from __future__ import annotations

from types import MappingProxyType

import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels.common.pdl import decode_chain, pdl_enabled
from rooflint.kernels.common.rope_pairs import why_not_pairs
from rooflint.kernels.weight_only_gemm import FAMILY

CODES_CU = cuda_build.family_source(__file__, "cuda")

# k16 steps a warp holds (2 registers each in one-byte codes), most preferred first: K = 16 * steps *
# warps, 4 <= warps <= 16 (8 at M > 8, a thread per output of the epilogue). 24 holds what the bf16
# kernel's 12 holds (48 registers); 32 is the only split of K = 8192 (16 warps).
STEPS = (24, 16, 12, 32, 8, 4)
MAX_WARPS = 16
MAX_ROWS = 16
FORMATS = {torch.int8: 0, torch.float8_e4m3fn: 1}


def steps_for(k: int, m: int, swiglu: bool = False) -> int:
    """k16 steps per warp for K and M rows (``swiglu``: two W tiles a block); 0 where no split fits."""
    least = 4 if m <= 8 else 8
    # Two x tiles (M > 8) or two W tiles (SwiGLU) double those registers: the longer shares would spill.
    most = (16 if m <= 8 else 8) if swiglu else (32 if m <= 8 else 16)
    for steps in STEPS:
        if steps > most:
            continue
        warps, rest = divmod(k, 16 * steps)
        if rest == 0 and least <= warps <= MAX_WARPS:
            return steps
    return 0


def why_not(x: torch.Tensor, w_q: torch.Tensor, w_scale: torch.Tensor, residual=None, swiglu=False) -> str | None:
    """Why the CUDA kernel cannot take this call (``swiglu``: as codes_swiglu), or None where it can."""
    if not x.is_cuda:
        return "the CUDA weight-only kernel needs a CUDA GPU of sm_80 or newer (bf16 mma.sync)"
    if x.dtype != torch.bfloat16 or (residual is not None and residual.dtype != x.dtype):
        return f"the CUDA weight-only kernel takes bf16 activations, not {x.dtype}"
    why = why_not_weight(x.shape[0], w_q, w_scale, swiglu)
    if why:
        return why
    if x.shape[1] != w_q.shape[1]:
        return f"x has {x.shape[1]} columns where W has {w_q.shape[1]}"
    if x.data_ptr() % 16 or w_q.data_ptr() % 16 or x.stride(0) % 8 or x.stride(1) != 1:
        return "the CUDA weight-only kernel needs 16-byte aligned x and W rows"
    return None


def why_not_weight(m: int, w_q: torch.Tensor, w_scale: torch.Tensor, swiglu: bool = False) -> str | None:
    """Why the CUDA kernel cannot take this weight at M rows (of bf16 activations), or None."""
    k = w_q.shape[1]
    if not w_q.is_cuda or torch.cuda.get_device_capability(w_q.device) < (8, 0):
        return "the CUDA weight-only kernel needs a CUDA GPU of sm_80 or newer (bf16 mma.sync)"
    if w_q.dtype not in FORMATS:
        return f"the CUDA weight-only kernel takes int8 or fp8 e4m3 codes, not {w_q.dtype}"
    if w_scale.numel() != w_q.shape[0]:
        return "the CUDA weight-only kernel takes per-channel scales only (a grouped weight runs on Triton)"
    if m > MAX_ROWS:
        return f"the CUDA weight-only kernel takes at most {MAX_ROWS} rows, not {m}"
    if not steps_for(k, m, swiglu):
        return f"the CUDA weight-only kernel splits no K = {k} at M = {m} (16 x steps x 4-16 warps)"
    if swiglu and w_q.shape[0] % 2:
        return f"a SwiGLU weight holds gate and up rows, an even count, not {w_q.shape[0]}"
    if cuda_build.nvcc_path() is None:
        return "the CUDA weight-only kernel is built on first use, and nvcc is not on PATH"
    return None


def codes_linear(x, w_q, w_scale, b=None, residual=None, out=None, gelu=False, pdl=None, steps=None):
    """act(x @ (w_q * w_scale)^T + b) (+ residual) for bf16 x [M <= 16, K], int8 or e4m3 codes w_q [N, K]
    (contiguous) and fp32 per-channel scales [N] or [N, 1]. ``pdl`` defaults to pdl_enabled (a decode
    chain on sm_90); ``steps`` overrides steps_for."""
    m, k = x.shape
    n = w_q.shape[0]
    why = why_not(x, w_q, w_scale, residual)
    if why:
        raise ValueError(why)
    steps = steps or steps_for(k, m)
    out = torch.empty((m, n), dtype=x.dtype, device=x.device) if out is None else out
    pdl = pdl_enabled(x.device) if pdl is None else pdl
    _launch(x, w_q, w_scale, b, residual, out, n, steps, 0, gelu, pdl)
    return out


def codes_swiglu(x, w_q, w_scale, b=None, out=None, pdl=None, steps=None):
    """silu(g) * u for [g | u] = x @ (w_q * w_scale)^T + b: a Llama MLP's gate/up projection, W = [gate
    rows; up rows] [2 ffn, K], out [M, ffn]. g and u are rounded to bf16 before the product, as the
    unfused GEMM's output is."""
    m, k = x.shape
    ffn = w_q.shape[0] // 2
    why = why_not(x, w_q, w_scale, swiglu=True)
    if why:
        raise ValueError(why)
    steps = steps or steps_for(k, m, swiglu=True)
    out = torch.empty((m, ffn), dtype=x.dtype, device=x.device) if out is None else out
    _launch(x, w_q, w_scale, b, None, out, ffn, steps, ffn, False, pdl_enabled(x.device) if pdl is None else pdl)
    return out


def why_not_rope(m: int, w_q: torch.Tensor, w_scale: torch.Tensor, rope_width: int, head_dim: int) -> str | None:
    """Why ``codes_qkv_rope`` cannot take the quantized QKV weight at M rows with RoPE over its first
    ``rope_width`` outputs (heads of ``head_dim``), or None where it can."""
    why = why_not_pairs("the weight-only RoPE epilogue", rope_width, w_q.shape[0], head_dim)
    return why or why_not_weight(m, w_q, w_scale)


def codes_qkv_rope(x, w_q, w_scale, b, cos, sin, start: int, tokens: int, rope_width: int, head_dim: int,
                   append=None, out=None, pdl=None, steps=None):  # fmt: skip
    """x @ (w_q * w_scale)^T + b [M, N] with outputs [0, rope_width) (the q and K heads of ``head_dim``)
    rotated by RoPE (rotate-half; row m is position start + m % tokens of cos, sin [positions,
    head_dim], bf16), and with ``append`` (gelu_linear.skinny.KVAppend) the rotated K and the V
    columns written to the paged cache: a Llama QKV projection and its rope kernel in one. Each output
    and its rotate-half partner are rounded to bf16 before the rotation, as the unfused projection's
    outputs are (gelu_linear.skinny_pdl.qkv_rope_reference on the dequantized weight is the reference)."""
    m, k = x.shape
    n = w_q.shape[0]
    why = why_not(x, w_q, w_scale) or why_not_rope(m, w_q, w_scale, rope_width, head_dim)
    if why is None and (cos.dtype != torch.bfloat16 or sin.dtype != torch.bfloat16):
        why = f"cos {cos.dtype} and sin {sin.dtype} must be bf16, the activations' dtype"
    if why is None and (cos.shape[-1] != head_dim or not cos.is_contiguous() or not sin.is_contiguous()):
        why = f"cos and sin must be contiguous [positions, {head_dim}]"
    if why is None and append is not None and append.slots.dtype != torch.int64:
        why = f"the K/V append's slots must be int64, not {append.slots.dtype}"
    if why:
        raise ValueError(why)
    steps = steps or steps_for(k, m)
    out = torch.empty((m, n), dtype=x.dtype, device=x.device) if out is None else out
    pdl = pdl_enabled(x.device) if pdl is None else pdl
    kv = append
    cuda_build.load(CODES_CU).launch(
        "rooflint_skinny_codes_rope", x, w_q.contiguous(), w_scale.contiguous(), b, out,
        m, n, k, x.stride(0), out.stride(0), steps, FORMATS[w_q.dtype], int(pdl),
        cos, sin, rope_width, head_dim, start, tokens,
        kv.slots if kv else None, kv.k_rows if kv else None, kv.v_rows if kv else None,
        kv.start if kv else 0, kv.heads * kv.head_dim if kv else 0, kv.heads if kv else 0, kv.head_dim if kv else 0,
    )  # fmt: skip
    return out


def _launch(x, w_q, w_scale, b, residual, out, n, steps, ffn, gelu, pdl):
    m, k = x.shape
    library = cuda_build.load(CODES_CU)
    library.launch(
        "rooflint_skinny_codes", x, w_q.contiguous(), w_scale.contiguous(), b, residual, out,
        m, n, k, x.stride(0), residual.stride(0) if residual is not None else 0, out.stride(0),
        steps, ffn, FORMATS[w_q.dtype], int(gelu), int(pdl),
    )  # fmt: skip


# What `rooflint ab --config` may set (docs/ab.md): STEPS, the k16 steps a warp holds (None: steps_for);
# PDL=1 launches as a model's decode step does, inside a decode chain.
CUDA_CONFIG = MappingProxyType({"STEPS": None, "PDL": None})


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC), sources=(CODES_CU,))
def cuda_variant(case, config=CUDA_CONFIG):
    """CUDA: each warp's codes in registers across the PDL wait, bf16 MMAs, the scale in the epilogue"""
    x, w_q, w_scale = case["x"], case["w_q"], case["w_scale"]
    why = why_not(x, w_q, w_scale)
    if why:
        raise VariantSkipped(why)
    steps = config["STEPS"]
    if steps is not None:
        k, m = x.shape[1], x.shape[0]
        warps, rest = divmod(k, 16 * steps)
        if steps not in STEPS or rest or not (4 if m <= 8 else 8) <= warps <= MAX_WARPS or (m > 8 and steps > 16):
            raise ValueError(f"STEPS={steps} splits no K = {k} at M = {m}; steps_for picks {steps_for(k, m)}")
    out = torch.empty((x.shape[0], w_q.shape[0]), dtype=x.dtype, device=x.device)
    if config["PDL"]:

        def in_chain():
            with decode_chain():
                return codes_linear(x, w_q, w_scale, out=out, steps=steps)

        return in_chain
    return lambda: codes_linear(x, w_q, w_scale, out=out, steps=steps, pdl=False)
