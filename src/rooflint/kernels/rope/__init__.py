"""rope: rotary position embedding of q and k, [batch, seq, heads, head_dim], "rotate half" form.

Convention (GPT-NeoX / Llama, non-interleaved): a head's first half x1 = x[:D/2] pairs with its
second half x2 = x[D/2:]; with angle a_i = pos * theta^(-2i/D), theta = 10000, pos = the seq index:
    out[:D/2] = x1 * cos(a) - x2 * sin(a),    out[D/2:] = x2 * cos(a) + x1 * sin(a).

Two forms of the kernel:
- table: cos and sin come from precomputed fp32 [seq, D/2] tables (what HF/vLLM pass around);
- fused: cos and sin are computed in the kernel from the position and the frequency.

How the cost model tells them apart (a family has one cost per case): ``cost`` is the work every
form must do, the q/k traffic and the rotation FLOPs; the table forms declare ``modeled_bytes`` with
the table reads on top (2 MB at the large size, 0.2% of the traffic), and the fused form's extra
work, one exp2 and one sincos per (position, frequency) pair, is counted in ``fused_extra_flops``
and in docs/perf-notes/memory-bound.md rather than folded into the shared FLOP count. On paper
neither difference is worth more than 0.2% of the memory-bound time; on the H100 the fused form
measured 1-2% faster (the table load is one more latency step per program).
"""

from __future__ import annotations

import torch

from rooflint.core.errors import UserError
from rooflint.core.family import Cost, Family, element_size, randn

THETA = 10000.0


def _dims(params):
    b, s, h, d = params["batch"], params["seq"], params["heads"], params["head_dim"]
    if d % 2:
        raise UserError(f"rope needs an even head_dim, not {d}")
    return b, s, h, d


def _angles(seq, half, device, dtype=torch.float64):
    inv_freq = THETA ** (-torch.arange(half, device=device, dtype=torch.float64) * 2 / (2 * half))
    return (torch.arange(seq, device=device, dtype=torch.float64)[:, None] * inv_freq[None, :]).to(dtype)


def make_inputs(params, dtype, device, generator):
    b, s, h, d = _dims(params)
    # The table is built in float64 and rounded once to fp32: fp32 keeps the angle's cosine exact
    # to 2^-24, and at [4096, 64] it is 2 MB next to 1 GB of q and k, so its width costs nothing.
    angles = _angles(s, d // 2, device)
    return {
        "q": randn([b, s, h, d], dtype, device, generator),
        "k": randn([b, s, h, d], dtype, device, generator),
        "cos": torch.cos(angles).float(),
        "sin": torch.sin(angles).float(),
    }


def _rotate64(x, cos, sin):
    x = x.double()
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos[:, None, :], sin[:, None, :]  # [seq, 1, half] broadcasts over batch and heads
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def reference(inputs, params):
    _, s, _, d = _dims(params)
    angles = _angles(s, d // 2, inputs["q"].device)
    cos, sin = torch.cos(angles), torch.sin(angles)
    # One tensor at a time: at the large size each float64 copy is 1 GB and the rotation makes ~4.
    return _rotate64(inputs["q"], cos, sin), _rotate64(inputs["k"], cos, sin)


def cost(params, dtype):
    b, s, h, d = _dims(params)
    n, size = b * s * h * d, element_size(dtype)
    return Cost(
        # out1 = x1*c - x2*s and out2 = x2*c + x1*s: 2 multiplies and 1 add per output element, q and k
        cuda_flops=2 * 3 * n,
        bytes=2 * n * size  # read q and k
        + 2 * n * size,  # write q_out and k_out
    )


def table_bytes(params, dtype):
    """HBM bytes of the cos and sin tables, read once (the only traffic the table form adds)."""
    _, s, _, d = _dims(params)
    return 2 * s * (d // 2) * 4  # fp32 cos and sin, [seq, D/2] each


def fused_extra_flops(params):
    """What the fused form computes instead of loading the table: per (position, frequency) one
    exp2 for the frequency, one multiply for the angle and a sincos, counted as ~40 FLOPs
    (libdevice sinf+cosf with range reduction is ~20 instructions each). Each is done once per
    position and shared by every head and by q and k (and recomputed for every batch)."""
    b, s, _, d = _dims(params)
    return b * s * (d // 2) * 42


def _table_modeled(params, dtype):
    return cost(params, dtype).bytes + table_bytes(params, dtype)


def _eager_modeled(params, dtype):
    # Per tensor of n elements, in element trips (read + write): neg(x2) 1, cat 2, x*cos 2,
    # rotate_half(x)*sin 2, add 3 = 10n, against the ideal 2n; the [seq, D] table casts are < 1%.
    b, s, h, d = _dims(params)
    return 2 * 10 * b * s * h * d * element_size(dtype) + table_bytes(params, dtype)


FAMILY = Family(
    "rope",
    summary="rotary embedding of q and k (rotate-half), from a cos/sin table or computed in-kernel",
    sizes={
        "small": [{"batch": 2, "seq": 64, "heads": 4, "head_dim": 64}],
        # q and k are 256 MiB each in bf16: 1 GiB moved, 20x the H100's 50 MB L2.
        "large": [{"batch": 8, "seq": 4096, "heads": 32, "head_dim": 128}],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
    # fp32: the fused form rounds inv_freq and the angle pos * inv_freq to fp32, as every fp32 RoPE
    # does: an absolute angle error up to seq * 2^-24 rad, measured 2.6e-5 norm-wise at seq 4096
    # (it grows linearly with seq). 2e-4 leaves room for the GPU's exp2 and still fails any wrong
    # element: a swapped half or a wrong sign is an O(1) error.
    tolerances={"fp32": 2e-4},
)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def eager_rope(q, k, cos, sin):
    """The Hugging Face formulation: [seq, D] cos/sin in the input dtype, x*cos + rotate_half(x)*sin."""
    cos = torch.cat((cos, cos), dim=-1).to(q.dtype)[:, None, :]
    sin = torch.cat((sin, sin), dim=-1).to(q.dtype)[:, None, :]
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


@FAMILY.variant("eager", modeled_bytes=_eager_modeled, baseline=True)
def eager(case):
    """PyTorch ops with the table (HF apply_rotary_pos_emb): ~5 kernels per tensor"""
    q, k, cos, sin = case["q"], case["k"], case["cos"], case["sin"]
    return lambda: eager_rope(q, k, cos, sin)


@FAMILY.variant("compile", modeled_bytes=_table_modeled)
def compiled(case):
    """torch.compile of the eager table form"""
    q, k, cos, sin = case["q"], case["k"], case["cos"], case["sin"]
    fn = torch.compile(eager_rope, dynamic=False)
    return lambda: fn(q, k, cos, sin)


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.rope import cuda, library, triton  # noqa: E402, F401
