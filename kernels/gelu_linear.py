"""gelu_linear: Y = GELU_tanh(X W^T + b), an MLP up-projection with its activation fused.

The matmul is compute-bound (2MNK tensor-core FLOPs over (MK + NK + MN) elements); the bias and
GELU are a few CUDA-core FLOPs per output. Fusing them into the GEMM's epilogue saves the round
trip of Y through HBM that the unfused chain pays (write Y, read it, write it again).

Dtypes are fp16 and bf16 only. An fp32 GEMM either runs on CUDA cores (51 TFLOP/s on an H100,
a different kernel entirely) or silently in TF32 (10-bit mantissas, which an fp32 tolerance would
reject); neither says anything about the fused epilogue, so fp32 is left out rather than blurred.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from rooflint.kernels import cuda_dtype

from rooflint import cuda_build
from rooflint.errors import VariantSkipped
from rooflint.family import NEEDS_CUDA, NEEDS_NVCC, NEEDS_TRITON, Cost, Family, element_size, randn

# CUDA-core FLOPs of one tanh-GELU: x^2, x^3, *0.044715, +x, *sqrt(2/pi), tanh, +1, *x, *0.5.
GELU_FLOPS = 9


def make_inputs(params, dtype, device, generator):
    m, k, n = params["m"], params["k"], params["n"]
    # W scaled by 1/sqrt(K), as nn.Linear initialises it, keeps X W^T near unit variance, where
    # GELU is curved; unscaled, |XW^T| ~ sqrt(K) = 90 and GELU degenerates into a ReLU.
    w = randn([n, k], torch.float32, device, generator) * k**-0.5
    return {
        "x": randn([m, k], dtype, device, generator),
        "w": w.to(dtype),
        "b": randn([n], dtype, device, generator),
    }


def reference(inputs, params):
    x, w, b = inputs["x"].double(), inputs["w"].double(), inputs["b"].double()
    return F.gelu(F.linear(x, w, b), approximate="tanh")


def cost(params, dtype):
    m, k, n, size = params["m"], params["k"], params["n"], element_size(dtype)
    return Cost(
        tensor_flops=2 * m * n * k,  # one multiply-add per (row, column, k) on the tensor cores
        cuda_flops=m * n * (1 + GELU_FLOPS),  # the epilogue: bias add, then GELU, per output
        bytes=m * k * size  # read X
        + n * k * size  # read W
        + n * size  # read b
        + m * n * size,  # write Y
    )


def unfused_bytes(params, dtype):
    """F.linear writes Y (bias fused by cuBLAS); F.gelu reads Y and writes it again."""
    return cost(params, dtype).bytes + 2 * params["m"] * params["n"] * element_size(dtype)


FAMILY = Family(
    "gelu_linear",
    summary="Y = gelu_tanh(X @ W^T + b)",
    sizes={
        "small": [{"m": 256, "k": 384, "n": 512}],
        # GPT-2's MLP up-projection (1024 tokens, 768 -> 3072): 12.6 MB, L2-sized, so the timer's
        # L2 flush is what keeps it honest; and the square 8192^3 GEMM, 384 MiB, compute-bound.
        "large": [{"m": 1024, "k": 768, "n": 3072}, {"m": 8192, "k": 8192, "n": 8192}],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
    dtypes=("fp16", "bf16"),
    # Defaults hold with room to spare: with fp32 accumulation the K=8192 dot products carry an
    # error near sqrt(K) * 2^-24 relative, far below the one rounding of Y to the output dtype
    # (2^-9 bf16, 2^-12 fp16); docs/perf-notes/decode-gelu-linear.md has the measured errors.
    tolerances={"fp16": 2e-3, "bf16": 1.6e-2},
)


@FAMILY.variant("eager", needs=(NEEDS_CUDA,))
def eager(case):
    """torch._addmm_activation(use_gelu=True): cuBLASLt's GELU+bias epilogue"""
    # CUDA only: on CUDA the fused epilogue (and its fallback) is tanh-GELU, but the CPU kernel
    # applies the exact erf GELU, a different function.
    x, w, b = case["x"], case["w"], case["b"]
    return lambda: torch._addmm_activation(b, x, w.t(), use_gelu=True)


def unfused(x, w, b):
    return F.gelu(F.linear(x, w, b), approximate="tanh")


@FAMILY.variant("eager_unfused", modeled_bytes=unfused_bytes)
def eager_unfused(case):
    """F.linear, then F.gelu: Y makes an extra round trip through HBM"""
    x, w, b = case["x"], case["w"], case["b"]
    return lambda: unfused(x, w, b)


# Inductor's default mode hands the matmul to cuBLAS (addmm, bias fused) and generates only the
# GELU kernel, so it moves the unfused chain's bytes; fusing into a Triton GEMM template needs
# mode="max-autotune", which is not what "compile" means here.
@FAMILY.variant("compile", modeled_bytes=unfused_bytes)
def compiled(case):
    """torch.compile(F.linear then F.gelu)"""
    x, w, b = case["x"], case["w"], case["b"]
    fn = torch.compile(unfused, dynamic=False)
    return lambda: fn(x, w, b)


def interpreting() -> bool:
    """Under TRITON_INTERPRET (triton 3.9), tl.dot on bf16 operands returns garbage; kernels
    then upcast their operands to fp32 first, which is exact, so the test still checks the
    kernel's indexing, masking and epilogue with fp32 accumulation."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _configs():
    if interpreting():
        # The interpreter runs every program in numpy: one small tile keeps tests fast.
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}, num_warps=4, num_stages=1)]
    # H100: 128x256 and 256x128 tiles do the most math per byte loaded (85 FLOP/B, 128x128: 64)
    # and fit 3 stages of 48 KB in its 227 KB of shared memory; 128x128 and 64-wide tiles give
    # more blocks, which the 1024x3072 GPT-2 shape needs (it has only 96 tiles of 128x256 for 132 SMs).
    shapes = [
        (128, 256, 64, 3, 8),
        (256, 128, 64, 3, 8),
        (128, 256, 64, 4, 8),
        (128, 128, 64, 4, 8),
        (128, 128, 64, 4, 4),
        (128, 64, 64, 4, 4),
        (64, 128, 64, 4, 4),
        (64, 64, 64, 5, 4),
        (128, 128, 32, 5, 4),
    ]
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_warps=w, num_stages=s)
        for bm, bn, bk, s, w in shapes
    ]


@triton.autotune(configs=_configs(), key=["M", "N", "K"])
@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def _gelu_linear_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    UPCAST: tl.constexpr,
):
    # Grouped order: GROUP_M tile rows share each W panel while it is still in L2.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * tiles_n
    first_m = (pid // width) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % rows
    pid_n = (pid % width) // rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Edge tiles wrap onto valid rows instead of masking: the loads stay unpredicated and
    # vectorized, and the store below drops the duplicates.
    rm = offs_m % M
    rn = offs_n % N
    rk = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rm[:, None] * K + rk[None, :]
    w_ptrs = w_ptr + rn[None, :] * K + rk[:, None]  # W^T's [BLOCK_K, BLOCK_N] tile, read K-contiguous

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(x_ptrs)
            b = tl.load(w_ptrs)
        else:
            k_left = K - kt * BLOCK_K
            a = tl.load(x_ptrs, mask=rk[None, :] < k_left, other=0.0)
            b = tl.load(w_ptrs, mask=rk[:, None] < k_left, other=0.0)
        if UPCAST:
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
        else:
            acc = tl.dot(a, b, acc)  # wgmma on Hopper, mma.sync on Ampere, fp32 accumulation
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K

    # Epilogue in fp32 registers: bias, then 0.5 z (1 + tanh(u)) written as z * sigmoid(2u).
    z = acc + tl.load(b_ptr + rn).to(tl.float32)[None, :]
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    out = z / (1.0 + tl.exp(-2.0 * u))
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], out.to(y_ptr.dtype.element_ty), mask=mask)


def triton_gelu_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None):
    m, k = x.shape
    n = w.shape[0]
    # 32-bit offsets inside the kernel: every operand must index below 2^31.
    assert max(m * k, n * k, m * n) < 2**31, "gelu_linear's Triton kernel uses 32-bit offsets"
    x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
    out = torch.empty((m, n), dtype=x.dtype, device=x.device) if out is None else out
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)
    _gelu_linear_kernel[grid](x, w, b, out, m, n, k, UPCAST=interpreting())
    return out


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case):
    """tiled tl.dot GEMM, bias + GELU in the epilogue, autotuned tiles"""
    x, w, b = case["x"], case["w"], case["b"]
    out = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
    return lambda: triton_gelu_linear(x, w, b, out)


def _set_tma_blocks(nargs):
    # Descriptors are built before the config is chosen; each config stamps its tile shape on them.
    nargs["x_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_K"]]
    nargs["w_desc"].block_shape = [nargs["BLOCK_N"], nargs["BLOCK_K"]]
    nargs["y_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_N"]]


def _tma_configs():
    if interpreting():
        tile = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}
        return [triton.Config(tile, num_warps=4, num_stages=1, pre_hook=_set_tma_blocks)]
    # TMA copies whole tiles from one thread, so no registers go to addresses: a 128x256 tile with
    # 8 warps keeps its 128 fp32 accumulators per thread and still fits. Stages x (BM + BN) x 64 x 2
    # bytes plus the epilogue's staging tile must stay under 227 KB.
    shapes = [
        (128, 256, 64, 3, 8),
        (256, 128, 64, 3, 8),
        (128, 256, 64, 4, 8),  # only if TMA's store reuses pipeline smem; else skipped as out of resources
        (128, 128, 64, 4, 8),
        (128, 128, 64, 5, 4),
        (64, 256, 64, 4, 4),
        (128, 64, 64, 5, 4),
    ]
    return [
        triton.Config(
            {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
            num_warps=w,
            num_stages=s,
            pre_hook=_set_tma_blocks,
        )
        for bm, bn, bk, s, w in shapes
    ]


@triton.autotune(configs=_tma_configs(), key=["M", "N", "K"])
@triton.jit
def _gelu_linear_tma_kernel(
    x_desc,
    w_desc,
    y_desc,
    b_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * tiles_n
    first_m = (pid // width) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    off_m = (first_m + (pid % width) % rows) * BLOCK_M
    off_n = ((pid % width) // rows) * BLOCK_N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        # The TMA unit zero-fills reads past M, N or K, so edge tiles need no masks.
        a = x_desc.load([off_m, k0])
        b = w_desc.load([off_n, k0])
        if UPCAST:
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32).T, acc)
        else:
            acc = tl.dot(a, b.T, acc)

    offs_n = off_n + tl.arange(0, BLOCK_N)
    z = acc + tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    out = z / (1.0 + tl.exp(-2.0 * u))
    y_desc.store([off_m, off_n], out.to(y_desc.dtype))  # TMA clips the store at M and N


def triton_tma_gelu_linear(x, w, b, out):
    from triton.tools.tensor_descriptor import TensorDescriptor

    m, k = x.shape
    n = w.shape[0]
    # Placeholder tile shapes: the chosen config's pre_hook overwrites them before each launch.
    x_desc = TensorDescriptor.from_tensor(x, [16, 16])
    w_desc = TensorDescriptor.from_tensor(w, [16, 16])
    y_desc = TensorDescriptor.from_tensor(out, [16, 16])
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)
    _gelu_linear_tma_kernel[grid](x_desc, w_desc, y_desc, b, m, n, k, UPCAST=interpreting())
    return out


@FAMILY.variant("triton_tma", kind="triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_tma_variant(case):
    """tiled GEMM fed by TMA descriptors, bias + GELU epilogue stored by TMA, autotuned"""
    x, w, b = case["x"].contiguous(), case["w"].contiguous(), case["b"]
    if x.shape[1] % 8 or w.shape[0] % 8:
        raise VariantSkipped("TMA needs 16-byte row strides: K and N multiples of 8")
    out = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
    return lambda: triton_tma_gelu_linear(x, w, b, out)


# --- persistent TMA kernel -------------------------------------------------------------------
# log2(e) folded into the GELU constants: sigmoid(2u) = 1 / (1 + 2^(-2 u log2 e)), and ex2 is one
# MUFU instruction where exp is ex2 plus a multiply.
GELU_C1 = tl.constexpr(-2.0 * 0.7978845608028654 * 1.4426950408889634)
GELU_C3 = tl.constexpr(-2.0 * 0.7978845608028654 * 1.4426950408889634 * 0.044715)


@triton.jit
def _tile_origin(tile, tiles_m, tiles_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    # Grouped order: consecutive tiles sweep GROUP_M tile rows per W panel, so the panel is
    # re-read from L2 rather than HBM.
    width = GROUP_M * tiles_n
    first_m = (tile // width) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    return (first_m + (tile % width) % rows) * BLOCK_M, ((tile % width) // rows) * BLOCK_N


@triton.jit
def _gelu_linear_persistent_kernel(
    x_desc,
    w_desc,
    y_desc,
    b_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_STORE: tl.constexpr,
    FLATTEN: tl.constexpr,
    UPCAST: tl.constexpr,
):
    # Persistent: the grid is a few programs per SM and each strides over the tiles. With the
    # tile loop flattened into the K loop, the software pipeliner issues the next tile's TMA loads
    # while this tile's epilogue runs, and no block pays a launch or a cold pipeline fill.
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(
        tl.program_id(0),
        tiles_m * tiles_n,
        tl.num_programs(0),
        flatten=FLATTEN,
    ):
        off_m, off_n = _tile_origin(tile, tiles_m, tiles_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(k_tiles):
            # The TMA unit zero-fills reads past M, N or K, so edge tiles need no masks.
            a = x_desc.load([off_m, kt * BLOCK_K])
            b = w_desc.load([off_n, kt * BLOCK_K])
            if UPCAST:
                acc = tl.dot(a.to(tl.float32), b.to(tl.float32).T, acc)
            else:
                acc = tl.dot(a, b.T, acc)  # wgmma, fp32 accumulation

        offs_n = off_n + tl.arange(0, BLOCK_N)
        z = acc + tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
        # 0.5 z (1 + tanh(u)) = z * sigmoid(2u), with an approximate divide: ex2 + rcp, no Newton steps.
        out = tl.fdiv(z, 1.0 + tl.exp2(z * (GELU_C1 + GELU_C3 * z * z)), ieee_rounding=False)
        out = out.to(y_desc.dtype)
        if SPLIT_STORE:
            # Two half-width TMA stores: the staging buffer in shared memory halves (32 KB for a
            # 128x256 bf16 tile), which leaves room for one more pipeline stage.
            left, right = out.reshape(BLOCK_M, 2, BLOCK_N // 2).permute(0, 2, 1).split()
            y_desc.store([off_m, off_n], left)
            y_desc.store([off_m, off_n + BLOCK_N // 2], right)
        else:
            y_desc.store([off_m, off_n], out)  # TMA clips the store at M and N


def num_sms(device: torch.device) -> int:
    # Under the interpreter (CPU tensors) a few programs still make each stride over several tiles.
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 3


def persistent_gelu_linear(
    x,
    w,
    b,
    out,
    block_m,
    block_n,
    block_k,
    group_m,
    split_store,
    num_warps,
    num_stages,
    programs_per_sm=1,
    flatten=True,
):
    """One explicit configuration of the persistent kernel (the sweep calls this)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    m, k = x.shape
    n = w.shape[0]
    x_desc = TensorDescriptor.from_tensor(x, [block_m, block_k])
    w_desc = TensorDescriptor.from_tensor(w, [block_n, block_k])
    y_desc = TensorDescriptor.from_tensor(out, [block_m, block_n // 2 if split_store else block_n])
    tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
    grid = (min(tiles, programs_per_sm * num_sms(x.device)),)
    _gelu_linear_persistent_kernel[grid](
        x_desc,
        w_desc,
        y_desc,
        b,
        m,
        n,
        k,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        GROUP_M=group_m,
        SPLIT_STORE=split_store,
        FLATTEN=flatten,
        UPCAST=interpreting(),
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out


def cuda_gelu_linear(library, x, w, b, out, config: int = -1):
    m, k = x.shape
    library.launch("rooflint_gelu_linear", x, w, b, out, m, w.shape[0], k, cuda_dtype(x.dtype), config)
    return out


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC))
def cuda_variant(case):
    """CUDA C++: mma.sync m16n8k16 + ldmatrix + cp.async ring, fused bias/GELU epilogue"""
    if torch.cuda.get_device_capability(case.device)[0] < 8:
        raise VariantSkipped("needs sm_80 or newer (bf16 mma.sync, cp.async)")
    x, w, b = case["x"], case["w"], case["b"]
    if x.shape[1] % 8:
        raise VariantSkipped("the CUDA kernel copies K in 16-byte chunks: K must be a multiple of 8")
    library = cuda_build.load(cuda_build.family_source(__file__))
    out = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
    return lambda: cuda_gelu_linear(library, x, w, b, out)
