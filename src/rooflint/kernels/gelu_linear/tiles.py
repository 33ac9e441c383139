"""gelu_linear: tiles implementation."""

from __future__ import annotations

from rooflint.core.triton_compat import tl, triton
from rooflint.kernels.common.gelu_tanh import gelu_tanh


@triton.jit
def dot_wt(a, b, acc, UPCAST: tl.constexpr):
    """acc + a @ b.T, a an X tile and b a W tile ([N, K] rows, as nn.Linear stores W)."""
    if UPCAST:  # the CPU interpreter multiplies 16-bit dot operands as raw bit patterns
        return tl.dot(a.to(tl.float32), b.to(tl.float32).T, acc)
    return tl.dot(a, b.T, acc)  # wgmma, fp32 accumulation


@triton.jit
def load_bias(b_ptr, off_n, N, BLOCK_N: tl.constexpr):
    """The tile's BLOCK_N bias values as fp32 (zeros past N)."""
    offs_n = off_n + tl.arange(0, BLOCK_N)
    return tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)


@triton.jit
def gelu_store(acc, bias, off_m, off_n, y_desc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                SPLIT_STORE: tl.constexpr, MUFU: tl.constexpr):  # fmt: skip
    """Y tile = GELU(acc + bias), rounded once, stored by TMA (clipped at M and N)."""
    # One MUFU op an element on the GPU (tanh.approx): a 128x192 tile's epilogue is 24,576 elements
    # on an SM's 16 MUFU lanes a clock, ~1,500 cycles saved against the two-op form in a GEMM whose
    # gap to cuBLASLt at GPT-2's shape was ~3,000. The CPU interpreter runs no PTX (common/gelu_tanh.py).
    out = gelu_tanh(acc + bias[None, :], MUFU).to(y_desc.dtype)
    if SPLIT_STORE:
        # Two half-width TMA stores: the staging tile in shared memory halves (32 KB for 128x256
        # bf16), which is what leaves room for another pipeline stage.
        left, right = out.reshape(BLOCK_M, 2, BLOCK_N // 2).permute(0, 2, 1).split()
        y_desc.store([off_m, off_n], left)
        y_desc.store([off_m, off_n + BLOCK_N // 2], right)
    else:
        y_desc.store([off_m, off_n], out)


# Under the interpreter (CPU tensors) 3 programs still make each stride over several tiles.
INTERPRETER_SMS = 3
