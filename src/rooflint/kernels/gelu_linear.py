"""gelu_linear: Y = GELU_tanh(X W^T + b), an MLP up-projection with its activation fused.

The matmul is compute-bound (2MNK tensor-core FLOPs over (MK + NK + MN) elements); the bias and
GELU are a few CUDA-core FLOPs per output. Fusing them into the GEMM's epilogue saves the round
trip of Y through HBM that the unfused chain pays (write Y, read it, write it again).

Dtypes are fp16 and bf16 only. An fp32 GEMM either runs on CUDA cores (51 TFLOP/s on an H100,
a different kernel entirely) or silently in TF32 (10-bit mantissas, which an fp32 tolerance would
reject); neither says anything about the fused epilogue, so fp32 is left out rather than blurred.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rooflint.core.errors import VariantSkipped
from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC, NEEDS_TRITON, Cost, Family, element_size, randn
from rooflint.core.triton_compat import interpreting, tl, triton
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype, sm_count
from rooflint.kernels._gelu import gelu_tanh

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
        # L2 flush is what keeps it honest; the same layer in a decode step of 8 sequences (a 4.7 MB
        # weight stream at 16 FLOP/B, memory-bound); and the square 8192^3 GEMM, 384 MiB, compute-bound.
        "large": [{"m": 1024, "k": 768, "n": 3072}, {"m": 8, "k": 768, "n": 3072}, {"m": 8192, "k": 8192, "n": 8192}],
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


def fused_epilogue(x, w, b):
    return torch._addmm_activation(b, x, w.t(), use_gelu=True)


@FAMILY.variant("eager", needs=(NEEDS_CUDA,), baseline=True)
def eager(case):
    """torch._addmm_activation(use_gelu=True): cuBLASLt's GELU+bias epilogue"""
    # CUDA only: on CUDA the fused epilogue (and its fallback) is tanh-GELU, but the CPU kernel
    # applies the exact erf GELU, a different function.
    x, w, b = case["x"], case["w"], case["b"]
    return lambda: fused_epilogue(x, w, b)


def unfused(x, w, b):
    return F.gelu(F.linear(x, w, b), approximate="tanh")


@FAMILY.variant("eager_unfused", modeled_bytes=unfused_bytes)
def eager_unfused(case):
    """F.linear, then F.gelu: Y makes an extra round trip through HBM"""
    x, w, b = case["x"], case["w"], case["b"]
    return lambda: unfused(x, w, b)


# torch.compile of each natural way to write the op, each its own row. Inductor's default mode hands
# the matmul to cuBLAS (addmm, bias fused) and generates only the GELU kernel, so the unfused form
# moves the unfused chain's bytes; fusing into a Triton GEMM template needs mode="max-autotune",
# which is not what "compile" means here.
@FAMILY.variant("compile_unfused", kind="compile", modeled_bytes=unfused_bytes)
def compiled_unfused(case):
    """torch.compile(F.linear then F.gelu)"""
    x, w, b = case["x"], case["w"], case["b"]
    fn = torch.compile(unfused, dynamic=False)
    return lambda: fn(x, w, b)


# Inductor has no lowering for _addmm_activation and calls the aten op itself (cuBLASLt's epilogue),
# so this row shows what compiling the fused built-in costs or saves around that one call.
@FAMILY.variant("compile_builtin", kind="compile", needs=(NEEDS_CUDA,))
def compiled_builtin(case):
    """torch.compile(torch._addmm_activation(use_gelu=True))"""
    # CUDA only, as eager: on CPU the op is the erf GELU, not this family's tanh GELU.
    x, w, b = case["x"], case["w"], case["b"]
    fn = torch.compile(fused_epilogue, dynamic=False)
    return lambda: fn(x, w, b)


def _set_tma_blocks(nargs):
    # Descriptors are built before the config is chosen; each config stamps its tile shape on them.
    # Y is stored in two half-width tiles (see the epilogue), so its block is BLOCK_N / 2 wide.
    nargs["x_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_K"]]
    nargs["w_desc"].block_shape = [nargs["BLOCK_N"], nargs["BLOCK_K"]]
    nargs["y_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_N"] // 2]


def _configs():
    if interpreting():
        # The interpreter runs every program in numpy: one small tile keeps tests fast.
        tile = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "PERSISTENT": True}
        return [triton.Config(tile, num_warps=4, num_stages=1, pre_hook=_set_tma_blocks)]
    # The two winners of a 19-config sweep on the H100 (docs/perf-notes/decode-gelu-linear.md,
    # "triton v3"), autotuned on (M, N, K):
    # - 128x256x64, 3 stages, 8 warps, persistent, GROUP_M 16: 8192^3. 164 registers, 176.5 KiB smem
    #   (3 x 48 KB of stages + a 32 KB half-tile for the store): one block per SM. The sweep's 4th
    #   stage cost ~4% more energy per call, and 8192^3 runs at the power cap (round 18,
    #   docs/perf-notes/kernels-at-limit.md): 3 stages ran 0.8% faster on the H100.
    # - 128x128x64, 3 stages, 8 warps, one program per tile: GPT-2's 1024x768x3072 (272 TFLOP/s).
    #   170 registers keep it at one block per SM, so its 192 tiles run as 1.45 waves.
    winners = [(128, 256, 64, 3, 8, 16, True), (128, 128, 64, 3, 8, 8, False)]
    return [
        triton.Config(
            {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group, "PERSISTENT": persistent},
            num_warps=w,
            num_stages=s,
            pre_hook=_set_tma_blocks,
        )
        for bm, bn, bk, s, w, group, persistent in winners
    ]


@triton.jit
def _tile_origin(tile, tiles_m, tiles_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    # Grouped order: consecutive tiles sweep GROUP_M tile rows per W panel, so the panel is
    # re-read from L2 rather than HBM.
    width = GROUP_M * tiles_n
    first_m = (tile // width) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    return (first_m + (tile % width) % rows) * BLOCK_M, ((tile % width) // rows) * BLOCK_N


@triton.jit
def _dot_wt(a, b, acc, UPCAST: tl.constexpr):
    """acc + a @ b.T, a an X tile and b a W tile ([N, K] rows, as nn.Linear stores W)."""
    if UPCAST:  # the CPU interpreter multiplies 16-bit dot operands as raw bit patterns
        return tl.dot(a.to(tl.float32), b.to(tl.float32).T, acc)
    return tl.dot(a, b.T, acc)  # wgmma, fp32 accumulation


@triton.jit
def _load_bias(b_ptr, off_n, N, BLOCK_N: tl.constexpr):
    """The tile's BLOCK_N bias values as fp32 (zeros past N)."""
    offs_n = off_n + tl.arange(0, BLOCK_N)
    return tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)


@triton.jit
def _gelu_store(acc, bias, off_m, off_n, y_desc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                SPLIT_STORE: tl.constexpr, MUFU: tl.constexpr):  # fmt: skip
    """Y tile = GELU(acc + bias), rounded once, stored by TMA (clipped at M and N)."""
    # One MUFU op an element on the GPU (tanh.approx): a 128x192 tile's epilogue is 24,576 elements
    # on an SM's 16 MUFU lanes a clock, ~1,500 cycles saved against the two-op form in a GEMM whose
    # gap to cuBLASLt at GPT-2's shape was ~3,000. The CPU interpreter runs no PTX (_gelu.py).
    out = gelu_tanh(acc + bias[None, :], MUFU).to(y_desc.dtype)
    if SPLIT_STORE:
        # Two half-width TMA stores: the staging tile in shared memory halves (32 KB for 128x256
        # bf16), which is what leaves room for another pipeline stage.
        left, right = out.reshape(BLOCK_M, 2, BLOCK_N // 2).permute(0, 2, 1).split()
        y_desc.store([off_m, off_n], left)
        y_desc.store([off_m, off_n + BLOCK_N // 2], right)
    else:
        y_desc.store([off_m, off_n], out)


@triton.autotune(configs=_configs(), key=["M", "N", "K"])
@triton.jit
def _gelu_linear_kernel(
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
    PERSISTENT: tl.constexpr,  # read by the launcher's grid: one program per SM, or per tile
    UPCAST: tl.constexpr,  # set exactly when the CPU interpreter runs the kernel
):
    # Each program strides over the tiles. Persistent (one program per SM), the tile loop is
    # flattened into the K loop, so the software pipeliner issues the next tile's TMA loads while
    # this tile's epilogue runs, and no block pays a launch or a cold pipeline fill.
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0), flatten=True):
        off_m, off_n = _tile_origin(tile, tiles_m, tiles_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(k_tiles):
            # The TMA unit zero-fills reads past M, N or K, so edge tiles need no masks.
            a = x_desc.load([off_m, kt * BLOCK_K])
            b = w_desc.load([off_n, kt * BLOCK_K])
            acc = _dot_wt(a, b, acc, UPCAST)
        # 16-bit data only (the family's dtypes): the one-MUFU GELU wherever PTX runs, i.e. not UPCAST.
        _gelu_store(acc, _load_bias(b_ptr, off_n, N, BLOCK_N), off_m, off_n, y_desc, BLOCK_M, BLOCK_N, True, not UPCAST)


# Under the interpreter (CPU tensors) 3 programs still make each stride over several tiles.
INTERPRETER_SMS = 3


def triton_gelu_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None):
    """One launch either way: up to 16 rows (a decode step) take the weight-streaming kernel of
    kernels/_gemm_skinny.py; more take the TMA GEMM below."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    from rooflint.kernels import _gemm_skinny

    m, k = x.shape
    n = w.shape[0]
    if m <= _gemm_skinny.MAX_ROWS:
        return _gemm_skinny.skinny_linear(x, w, b, gelu=True, out=out)
    # TMA descriptors need 16-byte aligned row strides.
    assert k % 8 == 0 and n % 8 == 0, "gelu_linear's Triton kernel needs K and N multiples of 8"
    x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
    out = torch.empty((m, n), dtype=x.dtype, device=x.device) if out is None else out
    # Placeholder tile shapes: the chosen config's pre_hook overwrites them before each launch.
    x_desc = TensorDescriptor.from_tensor(x, [16, 16])
    w_desc = TensorDescriptor.from_tensor(w, [16, 16])
    y_desc = TensorDescriptor.from_tensor(out, [16, 16])
    sms = sm_count(x.device, INTERPRETER_SMS)

    def grid(meta):
        tiles = triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"])
        return (min(tiles, sms) if meta["PERSISTENT"] else tiles,)

    _gelu_linear_kernel[grid](x_desc, w_desc, y_desc, b, m, n, k, UPCAST=interpreting())
    return out


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case):
    """TMA GEMM over a flattened tile loop, bias + GELU epilogue by TMA, autotuned; <= 16 rows: weight streaming"""
    x, w, b = case["x"], case["w"], case["b"]
    if x.shape[1] % 8 or w.shape[0] % 8:
        raise VariantSkipped("TMA needs 16-byte row strides: K and N multiples of 8")
    out = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
    return lambda: triton_gelu_linear(x, w, b, out)


def cuda_gelu_linear(library, x, w, b, out, config: int = -1):
    """config -1 lets the launcher choose; 0 forces mma.sync 128x128, 1 wgmma 128x256 (Hopper)."""
    m, k = x.shape
    library.launch("rooflint_gelu_linear", x, w, b, out, m, w.shape[0], k, cuda_dtype(x.dtype), config)
    return out


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC))
def cuda_variant(case):
    """CUDA C++: cp.async ring into wgmma m64n256k16 (Hopper) or mma.sync m16n8k16; fused bias/GELU"""
    if torch.cuda.get_device_capability(case.device)[0] < 8:
        raise VariantSkipped("needs sm_80 or newer (bf16 mma.sync, cp.async)")
    x, w, b = case["x"], case["w"], case["b"]
    if x.shape[1] % 8:
        raise VariantSkipped("the CUDA kernel copies K in 16-byte chunks: K must be a multiple of 8")
    library = cuda_build.load(cuda_build.family_source(__file__))
    out = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
    return lambda: cuda_gelu_linear(library, x, w, b, out)


@FAMILY.variant("cuda_hopper", kind="cuda", needs=(NEEDS_CUDA, NEEDS_NVCC))
def cuda_hopper_variant(case):
    """sm_90 only: warp-specialized wgmma GEMM (a TMA producer warpgroup, two consumers), fused bias/GELU"""
    if torch.cuda.get_device_capability(case.device) != (9, 0):
        raise VariantSkipped("the warp-specialized wgmma GEMM needs an sm_90 GPU (Hopper); `cuda` is the sm_80 path")
    x, w, b = case["x"], case["w"], case["b"]
    if x.shape[1] % 8:
        raise VariantSkipped("TMA copies rows of 16-byte multiples: K must be a multiple of 8")
    library = cuda_build.load(cuda_build.family_source(__file__, "gelu_linear_hopper"))
    out = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
    return lambda: cuda_hopper_gelu_linear(library, x, w, b, out)


def cuda_hopper_gelu_linear(library, x, w, b, out, block_n: int = 0, cluster: int = 0):
    """block_n 0 lets the launcher choose the tile width from the SM count; 192 or 256 force it.
    cluster 0 pairs neighbouring row blocks (TMA multicast of the shared W slice) where the grid is
    more than one wave; 1 or 2 force it."""
    m, k = x.shape
    n, dtype = w.shape[0], cuda_dtype(x.dtype)
    library.launch("rooflint_gelu_linear_hopper", x, w, b, out, m, n, k, dtype, block_n, cluster)
    return out


# The tile shape from the GPU's SM count, so small GEMMs fill whole waves (kernels/_gemm_small.py,
# issue 14): GPT-2's 1024x768->3072 takes 384 tiles of 128x64 on 132 SMs, 8192^3 keeps 128x256.
@FAMILY.variant("triton_wavefit", kind="triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_wavefit_variant(case):
    """sm_90+: persistent TMA GEMM, bias + GELU epilogue, tile chosen from the SM count to fill the waves"""
    from rooflint.kernels import _gemm_small

    return _gemm_small.build_variant(case)


# sm_90, Gluon: a producer warp and two consumer warpgroups that never wait for each other, in place of
# the Triton pipeliner's CTA barrier each K step (kernels/_gemm_gluon.py, issue 14).
@FAMILY.variant("triton_gluon", kind="triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_gluon_variant(case):
    """sm_90: Gluon GEMM, TMA producer warp + 2 consumer warpgroups on mbarriers, bias + GELU epilogue"""
    from rooflint.kernels import _gemm_gluon

    return _gemm_gluon.build_variant(case)
