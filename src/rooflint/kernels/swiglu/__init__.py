"""swiglu: out = silu(gate) * up, the activation of Llama's MLP, alone or with its projection.

Two forms, chosen by the ``hidden`` size key:

- ``hidden=0``: from gate and up [rows, inter]: the elementwise half of the MLP, between the gate
  and up projections and the down projection. Memory-bound: two reads and one write an element.
- ``hidden>0``: from x [rows, hidden] and the fused gate/up weight W [2 * inter, hidden] (gate's rows
  first, as vLLM's gate_up_proj): silu(x W_gateᵀ) * (x W_upᵀ). One GEMM, compute-bound; the
  floor needs gate and up never to reach HBM (an epilogue on the GEMM), which the forms here that
  materialize them pay for in their ``modeled_bytes``.
"""

from __future__ import annotations

import torch

from rooflint.core.family import Cost, Family, element_size, randn


def make_inputs(params, dtype, device, generator):
    rows, inter, hidden = params["rows"], params["inter"], params["hidden"]
    if not hidden:
        shape = [rows, inter]
        return {"gate": randn(shape, dtype, device, generator), "up": randn(shape, dtype, device, generator)}
    # W scaled by hidden^-1/2 so gate and up have unit variance, as a trained layer's are near.
    weight = (randn([2 * inter, hidden], torch.float32, device, generator) * hidden**-0.5).to(dtype)
    return {"x": randn([rows, hidden], dtype, device, generator), "weight": weight}


def reference(inputs, params):
    if params["hidden"]:
        gate, up = (inputs["x"].double() @ inputs["weight"].double().T).chunk(2, dim=-1)
    else:
        gate, up = inputs["gate"].double(), inputs["up"].double()
    return gate * torch.sigmoid(gate) * up


def cost(params, dtype):
    rows, inter, hidden, size = params["rows"], params["inter"], params["hidden"], element_size(dtype)
    n = rows * inter
    # per output element: negate, exp, add 1, divide (the sigmoid), times gate, times up
    swiglu_flops = 6 * n
    if not hidden:
        return Cost(
            cuda_flops=swiglu_flops,
            bytes=2 * n * size  # read gate and up
            + n * size,  # write out
        )
    return Cost(
        tensor_flops=2 * rows * hidden * 2 * inter,  # x Wᵀ: 2 FLOPs a multiply-add, gate's and up's columns
        cuda_flops=swiglu_flops,
        bytes=rows * hidden * size  # read x
        + 2 * inter * hidden * size  # read W
        + n * size,  # write out; gate and up stay on chip in a fused epilogue
    )


def projected_bytes(params, dtype):
    """A form that writes gate and up to HBM and reads them back: the floor plus that round trip."""
    extra = 2 * 2 * params["rows"] * params["inter"] * element_size(dtype) if params["hidden"] else 0
    return cost(params, dtype).bytes + extra


def gate_and_up(case):
    """gate and up: the inputs, or the halves of the projection computed here (F.linear, cuBLAS)."""
    if case.params["hidden"]:
        return torch.nn.functional.linear(case["x"], case["weight"]).chunk(2, dim=-1)
    return case["gate"], case["up"]


def swiglu_unfused(gate, up):
    """silu and the product as two ops, each a trip through HBM."""
    return torch.nn.functional.silu(gate) * up


def swiglu_projected(x, weight):
    gate, up = torch.nn.functional.linear(x, weight).chunk(2, dim=-1)
    return swiglu_unfused(gate, up)


def unfused_bytes(params, dtype):
    n, size = params["rows"] * params["inter"], element_size(dtype)
    return (
        projected_bytes(params, dtype)
        + n * size  # silu writes the activation
        + n * size  # the product reads it back
    )


FAMILY = Family(
    "swiglu",
    summary="SwiGLU silu(gate) * up, Llama's MLP activation, alone or fused with the gate/up projection",
    sizes={
        "small": [{"rows": 500, "inter": 1000, "hidden": 0}, {"rows": 257, "inter": 300, "hidden": 96}],
        # 8192 tokens of Llama-3-8B's MLP (hidden 4096, intermediate 14336): 224 MiB per bf16 tensor.
        "large": [{"rows": 8192, "inter": 14336, "hidden": 0}, {"rows": 8192, "inter": 14336, "hidden": 4096}],
    },
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
)


def _call(case, fn):
    if case.params["hidden"]:
        x, w = case["x"], case["weight"]
        return lambda: fn[1](x, w)
    gate, up = case["gate"], case["up"]
    return lambda: fn[0](gate, up)


# PyTorch has no SwiGLU op: its closest form is the two ops every Llama port writes, so the built-in
# row and the unfused one are this one row.
@FAMILY.variant("eager", modeled_bytes=unfused_bytes, baseline=True)
def eager(case):
    """F.silu(gate) * up: two kernels, the activation written and read back (after F.linear for x, W)"""
    return _call(case, (swiglu_unfused, swiglu_projected))


@FAMILY.variant("compile", modeled_bytes=projected_bytes)
def compiled(case):
    """torch.compile of F.silu(gate) * up, with F.linear for x, W (inductor fuses the pointwise part)"""
    return _call(case, (torch.compile(swiglu_unfused, dynamic=False), torch.compile(swiglu_projected, dynamic=False)))


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.swiglu import library, triton, triton_gemm  # noqa: E402, F401
