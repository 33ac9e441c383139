"""rmsnorm: y = x * rsqrt(mean(x^2) + eps) * w over the last dim (Llama, Mistral, Qwen's norm).

With ``residual=1`` the pre-norm residual add is fused in front, as every decoder layer does it:
h = x + residual is written out (the next layer's residual stream) and y = rmsnorm(h) * w.
Memory-bound: each row is read once and written once; w is re-read by every row from cache.
"""

from __future__ import annotations

import torch

from rooflint.core.family import Cost, Family, element_size, randn

EPS = 1e-6  # Llama's; the float64 reference and every variant use the same one


def make_inputs(params, dtype, device, generator):
    rows, hidden = params["rows"], params["hidden"]
    inputs = {
        "x": randn([rows, hidden], dtype, device, generator),
        "weight": randn([hidden], dtype, device, generator),
    }
    if params["residual"]:
        inputs["residual"] = randn([rows, hidden], dtype, device, generator)
    return inputs


def reference(inputs, params):
    """float64 y (and h = x + residual, with the residual) from the definition."""
    h = inputs["x"].double()
    if params["residual"]:
        h = h + inputs["residual"].double()
    y = h * torch.rsqrt((h * h).mean(dim=-1, keepdim=True) + EPS) * inputs["weight"].double()
    return (y, h) if params["residual"] else y


def cost(params, dtype):
    rows, hidden, size = params["rows"], params["hidden"], element_size(dtype)
    n = rows * hidden
    residual = bool(params["residual"])
    return Cost(
        # per element: square, add into the sum, scale by rstd, by w (and the residual add);
        # per row: divide by hidden, + eps, rsqrt
        cuda_flops=(5 if residual else 4) * n + 3 * rows,
        bytes=n * size  # read x
        + hidden * size  # read w once (every row re-reads it from cache)
        + n * size  # write y
        + (2 * n * size if residual else 0),  # read residual, write h
    )


def rmsnorm_unfused(x, weight, residual=None):
    """The Hugging Face Llama form: the norm in fp32, cast back, then times w in the input dtype."""
    h = x if residual is None else x + residual
    hf = h.float()
    variance = hf.pow(2).mean(dim=-1, keepdim=True)
    y = weight * (hf * torch.rsqrt(variance + EPS)).to(x.dtype)
    return y if residual is None else (y, h)


def unfused_bytes(params, dtype):
    """HBM bytes of rmsnorm_unfused, one term per kernel it launches."""
    rows, hidden, size = params["rows"], params["hidden"], element_size(dtype)
    n, f = rows * hidden, 4
    casts = 0 if size == f else 2 * (n * size + n * f)  # h.float() and .to(dtype): read, write each
    return (
        (3 * n * size if params["residual"] else 0)  # x + residual: read both, write h
        + casts
        + 2 * n * f  # pow(2): read, write
        + n * f  # mean: read
        + 4 * rows * f  # + eps, rsqrt: per-row vectors, read and write each
        + 2 * n * f  # * rsqrt: read, write
        + rows * f  # the mean writes one value a row
        + 3 * n * size  # weight *: read the normalized rows, write y
        + hidden * size  # read w
    )


def rmsnorm_builtin(x, weight, residual=None):
    """torch.nn.functional.rms_norm, behind a separate add where there is a residual."""
    h = x if residual is None else x + residual
    y = torch.nn.functional.rms_norm(h, (h.shape[-1],), weight, EPS)
    return y if residual is None else (y, h)


FAMILY = Family(
    "rmsnorm",
    summary="RMSNorm forward over the last dim with weight, optionally after a fused residual add",
    sizes={
        "small": [{"rows": 512, "hidden": 1000, "residual": False}, {"rows": 512, "hidden": 1000, "residual": True}],
        # 64 Mi elements: 128 MiB per bf16 tensor, 2.5x the H100's 50 MB L2; Llama-2-7B's hidden size.
        "large": [
            {"rows": 16384, "hidden": 4096, "residual": False},
            {"rows": 16384, "hidden": 4096, "residual": True},
        ],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
)


def _args(case):
    return case["x"], case["weight"], case.inputs.get("residual")


@FAMILY.variant("eager_unfused", modeled_bytes=unfused_bytes)
def eager_unfused(case):
    """add, upcast, square, mean, rsqrt, scale, downcast, *w as separate ops (Hugging Face's Llama)"""
    x, w, r = _args(case)
    return lambda: rmsnorm_unfused(x, w, r)


@FAMILY.variant("eager", baseline=True)
def eager(case):
    """torch.nn.functional.rms_norm (after x + residual, where there is one)"""
    x, w, r = _args(case)
    return lambda: rmsnorm_builtin(x, w, r)


@FAMILY.variant("compile_unfused", kind="compile")
def compiled_unfused(case):
    """torch.compile of the unfused Hugging Face form"""
    x, w, r = _args(case)
    fn = torch.compile(rmsnorm_unfused, dynamic=False)
    return lambda: fn(x, w, r)


@FAMILY.variant("compile_builtin", kind="compile")
def compiled_builtin(case):
    """torch.compile of F.rms_norm (with the residual add in the same graph)"""
    x, w, r = _args(case)
    fn = torch.compile(rmsnorm_builtin, dynamic=False)
    return lambda: fn(x, w, r)


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.rmsnorm import cuda, library, triton  # noqa: E402, F401
