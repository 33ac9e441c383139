"""What the kernel sets share: the set names ``--kernels`` takes, the slots a forward calls, the
fusions a set may apply, and the helpers more than one set's file uses (the K and V columns of a QKV
output, the padded lm_head of the triton and cuda sets, why a family does not cover a dtype).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rooflint.core.triton_compat import interpreting
from rooflint.models.cache import KVCache

# The set names, defined where `rooflint model` judges --kernels before torch loads.
from rooflint.models.flag_checks import ALL_SETS as ALL_SETS
from rooflint.models.flag_checks import KERNEL_SETS as KERNEL_SETS
from rooflint.models.flag_checks import LIBRARY_SETS as LIBRARY_SETS

SLOTS = (
    "layer_norm", "prefill_attention", "kv_append", "decode_attention", "linear_gelu", "linear", "lm_head", "sample",
)  # fmt: skip
FUSIONS = ("norm_linear", "linear_residual", "kv_append", "decoder_layers")
LM_HEAD_PAD = 128  # vocab rows padded to whole GEMM tiles (50257 -> 50304), where a set pads


def kv_span(qkv_width: int, cache: KVCache) -> tuple[int, int]:
    """(first K column, K width) of a QKV output [rows, (H + 2 H_kv) D]: q, then K, then V."""
    width = cache.kv_heads * cache.head_dim
    return qkv_width - 2 * width, width


class PaddedHead:
    """lm_head against the vocab padded to whole tiles (N = 50257 is a multiple of no GEMM tile;
    50304 is 393 tiles of 128), its logits sliced back to the vocab: a view, no copy."""

    def __init__(self) -> None:
        self._padded: dict[int, torch.Tensor] = {}

    def __call__(self, x, w):
        if w.shape[0] % LM_HEAD_PAD == 0:  # whole tiles already (Llama's 128256): no padded copy
            return F.linear(x, w)
        key = w.data_ptr()
        if key not in self._padded:
            rows = -(-w.shape[0] // LM_HEAD_PAD) * LM_HEAD_PAD
            padded = torch.zeros((rows, w.shape[1]), dtype=w.dtype, device=w.device)
            padded[: w.shape[0]] = w
            self._padded[key] = padded
        return F.linear(x, self._padded[key])[..., : w.shape[0]]


def dtype_gap(family, dtype: str, interpreter_fp32: bool = True) -> str | None:
    """Why a family's kernel is not used for ``dtype``, or None.

    Families leave fp32 out where the GPU would run its dots in TF32; Triton's CPU interpreter
    multiplies fp32 exactly, so there fp32 is allowed and the CPU tests can check the swaps in fp32.
    """
    if dtype in family.dtypes or (interpreter_fp32 and dtype == "fp32" and interpreting()):
        return None
    return f"the {family.name} family has no {dtype}"
