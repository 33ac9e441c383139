"""`rooflint model ... --weights-dtype int8|fp8`: a decode step's projections on 1-byte weights.

A decode step (<= 16 rows) streams every weight once, so its time is its bytes: storing the
projections' weights in one byte instead of two halves most of them. Each decode linear weight of
the Llama family (qkv, o, gate/up, down) is quantized once at build time, symmetric per output
channel (int8: scale = amax / 127; fp8 e4m3: amax / 448; fp32 scales, kernels/scaled_gemm/formats.py).
The embedding and lm_head keep the model's bf16 weights: the embedding reads B rows, not the
table, and the head's logits are what the check compares. Prefill (> 16 rows) is compute-bound
and keeps bf16, so the bf16 weights stay resident beside the codes.

The triton set runs the quantized projections on kernels/weight_only_gemm's Triton kernel (codes
dequantized in registers); the eager set is the PyTorch form, dequantize-then-F.linear every call.
compile and cuda keep bf16 weights and say so in their plan line.

The check (docs/quantized.md): one decode step's logits with the quantized weights against the
same step with the bf16 weights they came from, norm-wise relative error within LOGIT_TOLERANCES.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rooflint.core.errors import UserError
from rooflint.core.family import Cost, element_size
from rooflint.kernels.scaled_gemm.formats import SCALE_BYTES, quantize
from rooflint.models.base import Dims, Phase
from rooflint.models.checks import relative_error

WEIGHTS_DTYPES = ("bf16", "int8", "fp8")
CODE_DTYPES = {"int8": torch.int8, "fp8": torch.float8_e4m3fn}
QUANTIZED_SETS = ("triton", "eager")  # the weight-only kernel, and its PyTorch reference form
MAX_ROWS = 16  # the weight-only kernel's rows (kernels/weight_only_gemm.MAX_ROWS): a decode step's
DECODE_LINEARS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
# Norm-wise relative error of one decode step's logits against the bf16 weights' (docs/quantized.md).
# Measured on CPU (Llama, random weights, bf16, 3 prompts): 2 layers x hidden 64: int8 0.006-0.007,
# fp8 e4m3 0.018-0.019; 4 layers x hidden 128: int8 0.009-0.010, fp8 0.027-0.028. What remains
# is each weight's rounding (int8: at most amax/254 a weight; e4m3: 2^-4 of the weight, 3 mantissa
# bits), and the layers' errors add as the model deepens, so the gate leaves room for a 16-32
# layer model: about 5x the 2-layer error, 2x the 4-layer one.
LOGIT_TOLERANCES = {"int8": 0.05, "fp8": 0.08}


def resolve(weights_dtype: str | None, model_dtype: str, model_name: str = "llama") -> str | None:
    """The code format to quantize to ("int8" or "fp8"), or None for the model's own weights."""
    if weights_dtype is None:
        return None
    if weights_dtype not in WEIGHTS_DTYPES:
        raise UserError(f"unknown --weights-dtype {weights_dtype!r}; valid: {', '.join(WEIGHTS_DTYPES)}")
    if model_dtype != "bf16":
        raise UserError(
            f"--weights-dtype {weights_dtype} needs --dtype bf16 (the weight-only kernel takes bf16 activations), "
            f"not {model_dtype}"
        )
    if weights_dtype == "bf16":
        return None
    if model_name == "gpt2":
        raise UserError(
            "--weights-dtype int8/fp8 is Llama-family only: GPT-2's triton decode folds its layer norms into "
            "the QKV and MLP-up GEMMs, which have no quantized form"
        )
    return weights_dtype


@dataclass(frozen=True)
class QuantizedLinear:
    codes: torch.Tensor  # [N, K] int8 or float8_e4m3fn, nn.Linear's layout
    scale: torch.Tensor  # [N, 1] fp32, one per output channel

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        """codes * scale rounded once to ``dtype`` (the scale multiply in fp32)."""
        return (self.codes.float() * self.scale).to(dtype)


def quantize_linear(w: torch.Tensor, weights_dtype: str) -> QuantizedLinear:
    codes, scale = quantize(w.float(), CODE_DTYPES[weights_dtype], "row")
    return QuantizedLinear(codes, scale)


def decode_linear_weights(weights) -> list[torch.Tensor]:
    """Every Llama layer's projection weights, in forward order."""
    return [w for layer in weights.layers for w in (layer.qkv_w, layer.o_w, layer.gate_up_w, layer.down_w)]


def quantize_model(weights, weights_dtype: str) -> dict[int, QuantizedLinear]:
    """{bf16 weight's data pointer: its quantized form}: the slot's lookup from the weight it is given."""
    return {w.data_ptr(): quantize_linear(w, weights_dtype) for w in decode_linear_weights(weights)}


def attach(kernels, weights, weights_dtype: str | None) -> None:
    """Quantize the decode projections for ``kernels`` (a Llama set), saying in its plan what runs."""
    if weights_dtype not in CODE_DTYPES:  # None or bf16: the model's own weights
        return
    if kernels.name not in QUANTIZED_SETS:
        kernels.plan["weights"] = (
            f"bf16: --weights-dtype {weights_dtype} runs in the {' and '.join(QUANTIZED_SETS)} sets only"
        )
        return
    kernels.quantized = quantize_model(weights, weights_dtype)
    kernels.weights_dtype = weights_dtype
    how = "weight_only_gemm's Triton kernel" if kernels.name == "triton" else "dequantize, then F.linear"
    kernels.plan["weights"] = (
        f"{weights_dtype} per output channel for decode (<= {MAX_ROWS} rows) qkv, o, gate/up and down ({how}); "
        "embedding, lm_head and prefill bf16"
    )


def quantized_linear(kind: str, x, q: QuantizedLinear, b=None, residual=None):
    """y = x @ (codes * scale)^T (+ b) (+ residual): the weight-only kernel in the triton set; the
    dequantized bf16 weight through F.linear otherwise."""
    if kind == "triton":
        from rooflint.kernels.weight_only_gemm.triton import weight_only_linear

        y = weight_only_linear(x, q.codes, q.scale)
        if b is not None:
            y = y + b
    else:
        y = F.linear(x, q.dequantized(x.dtype), b)
    return y if residual is None else residual + y


def _linear_shapes(dims: Dims) -> dict[str, tuple[int, int]]:
    """(K, N) of each decode projection."""
    q_width, kv_width = dims.heads * dims.head_dim, dims.kv_heads * dims.head_dim
    return {
        "qkv_proj": (dims.hidden, q_width + 2 * kv_width),
        "o_proj": (q_width, dims.hidden),
        "gate_up_proj": (dims.hidden, 2 * dims.ffn),
        "down_proj": (dims.ffn, dims.hidden),
    }


def weight_bytes_saved(dims: Dims, model_dtype: str, weights_dtype: str) -> dict[str, int]:
    """Bytes a decode step reads less per op: each weight 1 byte instead of the model dtype's,
    plus one fp32 scale per output channel, over all layers."""
    size = element_size(model_dtype)
    return {
        op: dims.layers * (n * k * (size - 1) - n * SCALE_BYTES)
        for op, (k, n) in _linear_shapes(dims).items()
    }  # fmt: skip


def decode_costs(costs: dict[str, Cost], dims: Dims, phase: Phase, model_dtype: str, kernels) -> dict[str, Cost]:
    """``costs`` with the projections' weights counted at the bytes the set reads: 1-byte codes
    and fp32 scales where ``kernels`` runs this phase quantized; unchanged elsewhere."""
    weights_dtype = getattr(kernels, "weights_dtype", None)
    if weights_dtype is None or phase.name != "decode" or phase.batch > MAX_ROWS:
        return costs
    saved = weight_bytes_saved(dims, model_dtype, weights_dtype)
    return {
        op: dataclasses.replace(cost, bytes=cost.bytes - saved[op]) if op in saved else cost
        for op, cost in costs.items()
    }  # fmt: skip


@dataclass(frozen=True)
class QuantizedCheck:
    weights_dtype: str
    rel_error: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.rel_error <= self.tolerance

    def describe(self) -> str:
        text = (f"{self.weights_dtype} decode logits rel err {self.rel_error:.3g} vs the bf16 weights' "
                f"(tol {self.tolerance:g})")  # fmt: skip
        return text if self.passed else text + ": quantized weights too far from the bf16 model"


def decode_logits(runner, prompt: torch.Tensor) -> torch.Tensor:
    """The first decode step's logits [B, V] after a bf16 prefill of ``prompt`` (eager, uncaptured)."""
    runner.start(prompt)
    with torch.no_grad():
        return runner.spec.forward(runner.weights, runner.kernels, runner.token, prompt.shape[1], runner.cache,
                                   runner.rec, True).float()  # fmt: skip


def check_decode(runner, prompt: torch.Tensor) -> QuantizedCheck | None:
    """One decode step with the quantized weights against the same step with the bf16 weights they
    came from (the same set, the same cache); None where the set runs no quantized weights."""
    kernels = runner.kernels
    quantized = getattr(kernels, "quantized", None)
    if not quantized:
        return None
    got = decode_logits(runner, prompt)
    kernels.quantized = {}
    try:
        want = decode_logits(runner, prompt)
    finally:
        kernels.quantized = quantized
    error = relative_error(got, want)
    return QuantizedCheck(kernels.weights_dtype, error if math.isfinite(error) else math.inf,
                          LOGIT_TOLERANCES[kernels.weights_dtype])  # fmt: skip
