"""rope: the library peers, Liger-Kernel's (from a cos/sin table) and FlashInfer's (cos and sin
computed in the kernel from the position, as rooflint's fused form does)."""

from __future__ import annotations

import torch

from rooflint.kernels.common.libraries import FLASHINFER, LIGER, overwriting
from rooflint.kernels.rope import FAMILY, THETA


@FAMILY.variant("liger", library=LIGER)
def liger(case):
    """Liger-Kernel liger_rope: the HF form, from [1, seq, head_dim] cos and sin tables, in place"""
    rope = LIGER.function("transformers.functional", "liger_rope")
    # HF's tables repeat each frequency's value for both halves of the head; the fp32 table is kept.
    cos, sin = (torch.cat((t, t), dim=-1)[None] for t in (case["cos"], case["sin"]))

    def call(q, k):
        # Liger takes [batch, heads, seq, head_dim] views and rotates the storage under them in place.
        q_out, k_out = rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        return q_out.transpose(1, 2), k_out.transpose(1, 2)

    return overwriting(call, lambda: (case["q"].clone(), case["k"].clone()))


@FAMILY.variant("flashinfer", library=FLASHINFER, dtypes=("fp16", "bf16"))
def flashinfer(case):
    """FlashInfer apply_rope: ragged [tokens, heads, head_dim], cos and sin computed in the kernel"""
    apply_rope = FLASHINFER.function("", "apply_rope")
    b, s, h, d = (case.params[key] for key in ("batch", "seq", "heads", "head_dim"))
    device = case["q"].device
    q, k = case["q"].view(b * s, h, d), case["k"].view(b * s, h, d)
    indptr = torch.arange(0, b + 1, dtype=torch.int32, device=device) * s  # sequence i: tokens i*s ..
    offsets = torch.zeros(b, dtype=torch.int32, device=device)  # .. at positions 0 .. s-1

    def call():
        q_out, k_out = apply_rope(q, k, indptr, offsets, interleave=False, rope_theta=THETA)
        return q_out.view(b, s, h, d), k_out.view(b, s, h, d)

    return call
