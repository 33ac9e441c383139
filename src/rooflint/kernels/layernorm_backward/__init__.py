"""layernorm_backward: dx, dweight and dbias of y = LayerNorm(x) * weight + bias over the last dim.

With xhat = (x - mean) * rstd and g = dy * weight, per row of N:
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
and over all rows: dweight = sum(dy * xhat), dbias = sum(dy).
dx needs two row reductions; dweight and dbias are column reductions over every row. A fused
kernel reads x and dy once: each program owns a set of rows, keeps fp32 column sums for them in
registers, and writes one partial row per program; a second small kernel adds the partials. That
two-stage sum is deterministic and keeps fp32 accuracy, unlike one atomic add per element.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rooflint.core.family import Cost, Family, element_size, randn

EPS = 1e-5


# H100 SXM's SM count: the number of partial rows the fused kernels write is a multiple of it.
H100_SMS = 132


def make_inputs(params, dtype, device, generator):
    rows, hidden = params["rows"], params["hidden"]
    x = randn([rows, hidden], dtype, device, generator)
    # The forward pass saves mean and rstd in fp32 (as PyTorch's CUDA layer_norm does for every dtype).
    # Computed in float64 and rounded once, so they are the correctly rounded statistics: with
    # hidden == 1 the mean is then x itself and xhat exactly 0, as in the float64 reference.
    var, mean = torch.var_mean(x.double(), dim=-1, unbiased=False)
    return {
        "x": x,
        "weight": randn([hidden], dtype, device, generator),
        "bias": randn([hidden], dtype, device, generator),  # only for the reference's forward and eager's dbias shape
        "dy": randn([rows, hidden], dtype, device, generator),
        "mean": mean.float().contiguous(),
        "rstd": torch.rsqrt(var + EPS).float().contiguous(),
    }


def reference(inputs, params):
    # Autograd in float64. [16384, 4096] is 0.5 GB per float64 tensor; autograd keeps a handful: fine.
    # bench builds references under no_grad; autograd needs grad mode back on.
    with torch.enable_grad():
        x = inputs["x"].double().requires_grad_()
        weight = inputs["weight"].double().requires_grad_()
        bias = inputs["bias"].double().requires_grad_()
        y = F.layer_norm(x, (params["hidden"],), weight, bias, EPS)
        y.backward(inputs["dy"].double())
    return x.grad, weight.grad, bias.grad


def compare(output, reference):
    # With hidden == 1, xhat is 0, so dx and dweight are exactly 0; float64 autograd leaves ~1e-14
    # there, against which any relative error is 1. An RMS under 1e-10 cannot be a real gradient
    # of O(1) random inputs, so it is compared as the exact zero it stands for.
    exact = tuple(torch.zeros_like(r) if r.square().mean().sqrt().item() < 1e-10 else r for r in reference)
    return output, exact


def cost(params, dtype):
    rows, hidden, size = params["rows"], params["hidden"], element_size(dtype)
    elements = rows * hidden
    return Cost(
        # Per element: xhat = (x - mean) * rstd (2), g = dy * w (1), sum g (1), sum g*xhat (2),
        # dx = rstd * (g - c1 - xhat * c2) (4), dweight += dy * xhat (2), dbias += dy (1): 13.
        # Per row: c1 and c2 divide the two sums by N (2).
        cuda_flops=13 * elements + 2 * rows,
        bytes=2 * elements * size  # read x and dy
        + hidden * size  # read weight
        + 2 * rows * 4  # read the saved fp32 mean and rstd
        + elements * size  # write dx
        + 2 * hidden * size,  # write dweight and dbias
    )


# Programs per SM of the Triton rows kernel. One: at 156 registers x 256 threads a second program
# does not fit beside the first, so a grid of two per SM runs as two waves and the second wave ramps
# up again; one program per SM keeps 3 row buffers in flight instead.
TRITON_PROGRAMS_PER_SM = 1


# The CUDA kernel's capacity: blocks it may keep resident per SM (its launcher sizes its grid).
CUDA_PROGRAMS_PER_SM = 4


def num_programs(rows: int, device: torch.device | None = None, per_sm: int = TRITON_PROGRAMS_PER_SM) -> int:
    """Programs of the fused kernels, each writing one fp32 partial row of dweight and dbias."""
    if device is not None and device.type == "cuda":
        sms = torch.cuda.get_device_properties(device).multi_processor_count
    elif device is not None:
        sms = 2  # the CPU interpreter: a few programs still exercise the cross-program sum
    else:
        sms = H100_SMS
    return max(1, min(rows, per_sm * sms))


def fused_modeled_bytes(params, dtype, per_sm: int = TRITON_PROGRAMS_PER_SM):
    # The ideal traffic plus the partial sums: each program writes an fp32 partial row of dweight
    # and dbias, and the second kernel reads them back (2-4% of the ideal at the large size).
    programs = num_programs(params["rows"], torch.device("cuda") if torch.cuda.is_available() else None, per_sm)
    return cost(params, dtype).bytes + 2 * 2 * programs * params["hidden"] * 4


def eager_modeled_bytes(params, dtype):
    # PyTorch's CUDA backward runs dx and dweight/dbias as two kernels, each reading x and dy.
    return cost(params, dtype).bytes + 2 * params["rows"] * params["hidden"] * element_size(dtype)


def unfused(x, dy, weight, mean, rstd):
    """The backward formulas as separate PyTorch ops, in fp32 like the fused kernels."""
    x32, dy32, w32 = x.float(), dy.float(), weight.float()
    mean, rstd = mean[:, None], rstd[:, None]
    xhat = (x32 - mean) * rstd
    g = dy32 * w32
    c1 = g.mean(dim=-1, keepdim=True)
    c2 = (g * xhat).mean(dim=-1, keepdim=True)
    dx = (g - c1 - xhat * c2) * rstd
    dweight = (dy32 * xhat).sum(dim=0)
    dbias = dy32.sum(dim=0)
    return dx.to(x.dtype), dweight.to(weight.dtype), dbias.to(weight.dtype)


def unfused_modeled_bytes(params, dtype):
    # E fp32 elements are 4E bytes. Ops with one full-size input read 4E and write 4E:
    # x - mean, * rstd, dy * w, g - c1, xhat * c2, * rstd (6 ops, 48E). Ops with two read 8E and
    # write 4E: g * xhat, the subtraction, dy * xhat (3 ops, 36E). The four reductions read 4E each
    # (16E). Casting x and dy up and dx down moves (size + 4)E each, unless the dtype is fp32 already.
    # The per-row and per-column vectors are under 0.1% and left out.
    elements, size = params["rows"] * params["hidden"], element_size(dtype)
    casts = 0 if size == 4 else 3 * (size + 4)
    return elements * (48 + 36 + 16 + casts)


FAMILY = Family(
    "layernorm_backward",
    summary="dx, dweight, dbias of LayerNorm over the last dim, from saved fp32 mean and rstd",
    sizes={
        "small": [{"rows": 257, "hidden": 1000}],
        # x, dy and dx are 128 MiB each in bf16: 400 MB moved, 8x the H100's 50 MB L2.
        "large": [{"rows": 16384, "hidden": 4096}],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
    # dx and the two column sums are each rounded once from fp32 to the output dtype. Measured on
    # the H100 at the large size (16384-row column sums), worst of dx/dweight/dbias: fp32 2.2e-7
    # (eager 4.2e-7), fp16 2.07e-4, bf16 1.69e-3; on CPU at 257x1000 the same (the interpreter's
    # bf16 cast truncates instead of rounding: 3.3e-3). The fp32 sums' own rounding, ~sqrt(16384)
    # x 6e-8 at worst, is invisible next to the final rounding. The defaults (1e-5, 2e-3, 1.6e-2)
    # hold all of that with a margin of 5-45x and still fail a low-precision accumulator: PyTorch's
    # CPU backward gets even dbias = sum(dy) 3.7e-2 wrong in bf16 at 2048 rows.
    compare=compare,
)


def builtin_arguments(case):
    """native_layer_norm_backward's arguments, with the saved statistics in the dtype PyTorch's
    forward saves them in on this device (fp32 on CUDA; the input dtype on CPU, whose backward
    insists on it)."""
    x, dy, weight, bias = case["x"], case["dy"], case["weight"], case["bias"]
    saved = torch.ops.aten.native_layer_norm(x[:1], [x.shape[1]], weight, bias, EPS)[1].dtype
    mean, rstd = case["mean"][:, None].to(saved), case["rstd"][:, None].to(saved)
    return dy, x, mean, rstd, weight, bias


def builtin(dy, x, mean, rstd, weight, bias):
    return torch.ops.aten.native_layer_norm_backward(dy, x, [x.shape[1]], mean, rstd, weight, bias, [True] * 3)


@FAMILY.variant("eager", modeled_bytes=eager_modeled_bytes, baseline=True)
def eager(case):
    """aten.native_layer_norm_backward, PyTorch's built-in backward"""
    args = builtin_arguments(case)
    return lambda: builtin(*args)


@FAMILY.variant("eager_unfused", modeled_bytes=unfused_modeled_bytes)
def eager_unfused(case):
    """the formulas as separate fp32 PyTorch ops"""
    args = case["x"], case["dy"], case["weight"], case["mean"], case["rstd"]
    return lambda: unfused(*args)


# torch.compile of each natural way to write the backward, each its own row.
@FAMILY.variant("compile_unfused", kind="compile")
def compiled_unfused(case):
    """torch.compile of the unfused formulas"""
    args = case["x"], case["dy"], case["weight"], case["mean"], case["rstd"]
    fn = torch.compile(unfused, dynamic=False)
    return lambda: fn(*args)


@FAMILY.variant("compile_builtin", kind="compile")
def compiled_builtin(case):
    """torch.compile of aten.native_layer_norm_backward (inductor decomposes it)"""
    args = builtin_arguments(case)
    fn = torch.compile(builtin, dynamic=False)
    return lambda: fn(*args)


def allocate(x, weight, programs):
    """dx, dweight, dbias and the fp32 partial rows [2, programs, N], allocated once per case."""
    partial = torch.empty((2, programs, x.shape[1]), dtype=torch.float32, device=x.device)
    return torch.empty_like(x), torch.empty_like(weight), torch.empty_like(weight), partial


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.layernorm_backward import cuda, triton  # noqa: E402, F401
