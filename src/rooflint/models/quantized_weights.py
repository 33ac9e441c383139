"""`rooflint model ... --weights-dtype int8|fp8`: a decode step's projections on 1-byte weights.

A decode step (<= 16 rows) streams every weight once, so its time is its bytes: storing the
weights in one byte instead of two halves most of them. Each decode linear weight of the Llama
family (qkv, o, gate/up, down) is quantized once at build time, symmetric per output channel (int8:
scale = amax / 127; fp8 e4m3: amax / 448; fp32 scales, kernels/scaled_gemm/formats.py), and
the lm_head too: at a 128k vocabulary it is a fifth of the weight bytes a Llama-3.2-1B decode
step reads. The embedding keeps the model's bf16 table, tied to the head or not: a step reads B rows
of it, not the table. Prefill (> 16 rows) is compute-bound and keeps bf16, so the bf16 weights stay
resident beside the codes.

The triton set runs the quantized projections and the head on kernels/weight_only_gemm's CUDA
kernel where it splits K (the codes held in registers across the PDL wait; the residual add,
gate/up's silu(gate) * up, and the QKV projection's RoPE and paged K/V append in its epilogue), else
on its Triton kernel. The eager set is the
PyTorch form, dequantize-then-F.linear every call. compile and cuda keep bf16 weights and say so in
their plan line.

The check (docs/quantized.md): one decode step's logits against the model whose projections are
the dequantized weights, in fp32 (check_decode: the gate, for the kernels), the codes and scales
against the bf16 weights within the format's rounding (round_trip_error), and the step's drift from
the bf16 weights, reported, not gated: that is the format's quality, the same for every kernel.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rooflint.core.errors import UserError
from rooflint.core.family import Cost, dtype_name, element_size
from rooflint.kernels.scaled_gemm.formats import SCALE_BYTES, quantize
from rooflint.models import checks
from rooflint.models.base import Dims, Phase, copy_model
from rooflint.models.checks import relative_error
from rooflint.models.outcome import QUANTIZED_SETS
from rooflint.models.runner import Runner

WEIGHTS_DTYPES = ("bf16", "int8", "fp8")
CODE_DTYPES = {"int8": torch.int8, "fp8": torch.float8_e4m3fn}
MAX_ROWS = 16  # the weight-only kernel's rows (kernels/weight_only_gemm.MAX_ROWS): a decode step's
DECODE_LINEARS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
HEAD = "lm_head"


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

    @property
    def format(self) -> str:
        """ "int8" or "fp8", as --weights-dtype names it."""
        return "int8" if self.codes.dtype == torch.int8 else "fp8"

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        """codes * scale rounded once to ``dtype`` (the scale multiply in fp32)."""
        return (self.codes.float() * self.scale).to(dtype)


def quantize_linear(w: torch.Tensor, weights_dtype: str) -> QuantizedLinear:
    codes, scale = quantize(w.float(), CODE_DTYPES[weights_dtype], "row")
    return QuantizedLinear(codes, scale)


def decode_linear_weights(weights) -> list[torch.Tensor]:
    """Every Llama layer's projection weights, in forward order."""
    return [w for layer in weights.layers for w in (layer.qkv_w, layer.o_w, layer.gate_up_w, layer.down_w)]


def quantized_weights(weights) -> list[tuple[str, torch.Tensor]]:
    """(name, weight) of every weight a decode step reads quantized: each layer's projections, then
    the head."""
    names = [f"layer {i} {name}" for i in range(len(weights.layers)) for name in DECODE_LINEARS]
    named = list(zip(names, decode_linear_weights(weights), strict=True))
    return [*named, (HEAD, weights.head)]


def quantize_model(weights, weights_dtype: str) -> dict[int, QuantizedLinear]:
    """{bf16 weight's data pointer: its quantized form}: the slot's lookup from the weight it is given.
    A head tied to the embedding shares its pointer; only the linear and lm_head slots look it up."""
    return {w.data_ptr(): quantize_linear(w, weights_dtype) for _, w in quantized_weights(weights)}


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
    kernels.gate_up_quantized = kernels.quantized[weights.layers[0].gate_up_w.data_ptr()]  # for fusions()
    kernels.qkv_quantized = kernels.quantized[weights.layers[0].qkv_w.data_ptr()]
    how = "dequantize, then F.linear"
    if kernels.name == "triton":
        how = ("weight_only_gemm's CUDA kernel where it splits K, gate/up with silu(gate) * up and qkv with RoPE "
               "and the K/V append in its epilogue; else its Triton kernel")  # fmt: skip
    kernels.plan["weights"] = (
        f"{weights_dtype} per output channel for decode (<= {MAX_ROWS} rows) qkv, o, gate/up, down and lm_head "
        f"({how}), embedding and prefill bf16"
    )


def quantized_linear(kind: str, x, q: QuantizedLinear, b=None, residual=None):
    """y = x @ (codes * scale)^T (+ b) (+ residual): the weight-only kernel in the triton set; the
    dequantized bf16 weight through F.linear otherwise."""
    if kind == "triton":
        from rooflint.kernels.weight_only_gemm import cuda
        from rooflint.kernels.weight_only_gemm.triton import weight_only_linear

        if cuda.why_not(x, q.codes, q.scale, residual) is None:  # bias, residual fused
            return cuda.codes_linear(x, q.codes, q.scale, b, residual)
        y = weight_only_linear(x, q.codes, q.scale)
        if b is not None:
            y = y + b
    else:
        y = F.linear(x, q.dequantized(x.dtype), b)
    return y if residual is None else residual + y


def swiglu_in_gemm(kind: str, rows: int, gate_up: QuantizedLinear | None) -> bool:
    """Whether the set's gate/up projection writes silu(gate) * up itself at ``rows``: the triton set's
    CUDA weight-only kernel where it takes the quantized gate/up weight (the gate_up_swiglu fusion)."""
    if kind != "triton" or gate_up is None or rows > MAX_ROWS:
        return False
    from rooflint.kernels.weight_only_gemm import cuda

    return cuda.why_not_weight(rows, gate_up.codes, gate_up.scale, swiglu=True) is None


def rope_in_gemm(kind: str, rows: int, qkv: QuantizedLinear | None, rope_dims) -> bool:
    """Whether the set's QKV projection rotates q and K and appends K and V itself at ``rows``: the triton
    set's CUDA weight-only kernel where it takes the quantized QKV weight (the qkv_rope fusion).
    ``rope_dims``: (heads, kv_heads, head_dim)."""
    if kind != "triton" or qkv is None or rope_dims is None or rows > MAX_ROWS:
        return False
    from rooflint.kernels.weight_only_gemm import cuda

    heads, kv_heads, d = rope_dims
    return cuda.why_not_rope(rows, qkv.codes, qkv.scale, (heads + kv_heads) * d, d) is None


def quantized_qkv_rope(x, q: QuantizedLinear, b, cos, sin, start: int, tokens: int, rope_width: int, head_dim: int,
                       append=None):  # fmt: skip
    """The QKV projection of x on the quantized weight with RoPE over its first ``rope_width`` outputs and
    ``append``'s paged K/V append, in one CUDA kernel (weight_only_gemm.cuda.codes_qkv_rope)."""
    from rooflint.kernels.weight_only_gemm import cuda

    return cuda.codes_qkv_rope(x, q.codes, q.scale, b, cos, sin, start, tokens, rope_width, head_dim, append)


def quantized_swiglu(x, q: QuantizedLinear, b=None):
    """silu(gate) * up [rows, ffn] from x and the quantized [gate; up] weight, in one CUDA kernel."""
    from rooflint.kernels.weight_only_gemm import cuda

    return cuda.codes_swiglu(x, q.codes, q.scale, b)


def _linear_shapes(dims: Dims) -> dict[str, tuple[int, int]]:
    """(K, N) of each decode projection."""
    q_width, kv_width = dims.heads * dims.head_dim, dims.kv_heads * dims.head_dim
    return {
        "qkv_proj": (dims.hidden, q_width + 2 * kv_width),
        "o_proj": (q_width, dims.hidden),
        "gate_up_proj": (dims.hidden, 2 * dims.ffn),
        "down_proj": (dims.ffn, dims.hidden),
    }


def weight_bytes_saved(dims: Dims, model_dtype: str) -> dict[str, int]:
    """Bytes a decode step reads less per op: each weight 1 byte instead of the model dtype's,
    plus one fp32 scale per output channel, over all layers, and the head's once."""
    size = element_size(model_dtype)
    saved = {
        op: dims.layers * (n * k * (size - 1) - n * SCALE_BYTES)
        for op, (k, n) in _linear_shapes(dims).items()
    }  # fmt: skip
    saved[HEAD] = dims.vocab * dims.hidden * (size - 1) - dims.vocab * SCALE_BYTES
    return saved


def decode_costs(costs: dict[str, Cost], dims: Dims, phase: Phase, model_dtype: str, kernels) -> dict[str, Cost]:
    """``costs`` with the projections' weights counted at the bytes the set reads: 1-byte codes
    and fp32 scales where ``kernels`` runs this phase quantized; unchanged elsewhere."""
    weights_dtype = getattr(kernels, "weights_dtype", None)
    if weights_dtype is None or phase.name != "decode" or phase.batch > MAX_ROWS:
        return costs
    saved = weight_bytes_saved(dims, model_dtype)
    return {
        op: dataclasses.replace(cost, bytes=cost.bytes - saved[op]) if op in saved else cost
        for op, cost in costs.items()
    }  # fmt: skip


@dataclass(frozen=True)
class QuantizedCheck:
    """One decode step of a set with quantized weights, checked against the same dequantized math in
    fp32 (the gate), and its drift from the bf16 weights it was quantized from (reported)."""

    weights_dtype: str
    rel_error: float  # the set's logits against the fp32 model on the dequantized weights
    tolerance: float  # checks.gate: the run dtype's floor, or REFERENCE_MARGIN x reference_error
    reference_error: float | None  # PyTorch eager in the run's dtype on the same weights, against fp32
    drift: float  # the set's logits against its own run on the bf16 weights: the format's effect
    note: str = ""  # why there is no fp32 reference
    round_trip: str | None = None  # a projection whose codes and scales are not its bf16 weight (round_trip_error)

    @property
    def passed(self) -> bool:
        return self.rel_error <= self.tolerance and self.round_trip is None

    def describe(self) -> str:
        if self.reference_error is None:
            against = f"vs eager on the dequantized weights ({self.note}; gate {self.tolerance:.3g})"
        else:
            against = (f"vs fp32 on the dequantized weights (eager bf16: {self.reference_error:.3g}; "
                       f"gate {self.tolerance:.3g})")  # fmt: skip
        text = (f"{self.weights_dtype} decode logits rel err {self.rel_error:.3g} {against}, "
                f"{self.weights_dtype} weights move the logits {self.drift:.1%} from bf16")  # fmt: skip
        if self.round_trip is not None:
            return f"{text}: {self.round_trip}"
        return text if self.passed else text + ": the quantized kernels do not compute the dequantized model"


def decode_logits(runner, prompt: torch.Tensor, token: torch.Tensor | None = None) -> torch.Tensor:
    """The first decode step's logits [B, V] after a prefill of ``prompt`` (eager, uncaptured), on the
    prefill's own pick for the step's input, or on ``token`` [B, 1] where given."""
    runner.start(prompt)
    if token is not None:
        runner.token.copy_(token)
    with torch.no_grad():
        return runner.spec.forward(runner.weights, runner.kernels, runner.token, prompt.shape[1], runner.cache,
                                   runner.rec, True).float()  # fmt: skip


def check_decode(runner, prompt: torch.Tensor, fp32_fits: bool = True) -> QuantizedCheck | None:
    """The set's first decode step with its quantized weights against the model whose projections
    ARE the dequantized weights (codes * scale held in fp32, the rest of the model the same), run by
    PyTorch eager in fp32 with plain F.linear (no quantized path of rooflint's), gated as
    models/checks.py gates a reduced-precision set: within max(floor, REFERENCE_MARGIN x the same
    eager model's own error in the run's dtype). The quantization's own error is in neither side, so
    what is left is the kernels'; the codes and scales themselves are held to the format's rounding
    of the bf16 weights (round_trip_error). ``fp32_fits`` False (no room for an fp32 copy): the
    run's-dtype model is the reference, gated at the floor. None where the set runs no quantized
    weights."""
    kernels = runner.kernels
    quantized = getattr(kernels, "quantized", None)
    if not quantized:
        return None
    weights_dtype, loaded = kernels.weights_dtype, runner.loaded
    dtype, round_trip = dtype_name(loaded.dtype), round_trip_error(loaded.weights, quantized)
    got = decode_logits(runner, prompt)
    # Every side decodes the token the set's prefill picked. The set's prefill runs its last position's
    # B rows through the quantized head, where the bf16 side runs the bf16 head: at a near tie the two
    # argmaxes differ, and that row's logits would then be another token's (an fp8 head flipped 1 of 8
    # rows of a 16-layer random Llama-3.2-1B: 0.43 of error that no kernel made).
    token = runner.token.clone()
    drift = _finite(relative_error(got, _with_bf16_weights(runner, prompt, token)))
    same_dtype = _dequantized_model_decode(runner, prompt, loaded.dtype, token)
    if not fp32_fits:
        note = "no fp32 reference: an fp32 copy does not fit"
        return QuantizedCheck(weights_dtype, _finite(relative_error(got, same_dtype)), checks.gate(dtype, None), None,
                              drift, note, round_trip)  # fmt: skip
    exact = _dequantized_model_decode(runner, prompt, torch.float32, token)
    reference_error = _finite(relative_error(same_dtype, exact))
    return QuantizedCheck(weights_dtype, _finite(relative_error(got, exact)), checks.gate(dtype, reference_error),
                          reference_error, drift, round_trip=round_trip)  # fmt: skip


def _with_bf16_weights(runner, prompt, token: torch.Tensor) -> torch.Tensor:
    """The same step, same set, same input token, on the bf16 weights the codes came from."""
    kernels = runner.kernels
    quantized, kernels.quantized = kernels.quantized, {}
    try:
        return decode_logits(runner, prompt, token)
    finally:
        kernels.quantized = quantized


def _dequantized_model_decode(runner, prompt, dtype: torch.dtype, token: torch.Tensor) -> torch.Tensor:
    """The first decode step, on ``token``, of a ``dtype`` copy of the model, run by PyTorch eager on plain weights:
    each forward whose rows the set runs quantized (<= MAX_ROWS: the decode step, and a prefill that
    small) sees the projections as the dequantized weights (codes * scale in fp32, rounded once to
    ``dtype``), any other forward (a larger prefill) the bf16 weights, as the set's slots choose."""
    loaded, quantized = runner.loaded, runner.kernels.quantized
    model = copy_model(loaded, dtype)
    spec = model.spec
    eager = spec.kernel_set("eager", dtype, model.device, model.dims.head_dim, spec.norm_eps(model.hf.config))
    twin = Runner(model, eager, runner.batch, runner.prompt, runner.new_tokens)
    if model.weights.head.data_ptr() == model.weights.embed.data_ptr():
        # Tied: the head's dequantized copy must not become the embedding too, which the set keeps bf16.
        model.weights.head = model.weights.head.clone()
    pairs = [(original, copy) for (_, original), (_, copy) in
             zip(quantized_weights(loaded.weights), quantized_weights(model.weights), strict=True)]  # fmt: skip

    def projections(dequantized: bool) -> None:
        with torch.no_grad():
            for original, copy in pairs:
                q = quantized[original.data_ptr()]
                copy.copy_(q.codes.float() * q.scale if dequantized else original)

    try:
        projections(prompt.numel() <= MAX_ROWS)
        twin.start(prompt)
        twin.token.copy_(token)
        projections(runner.batch <= MAX_ROWS)
        with torch.no_grad():
            return spec.forward(model.weights, eager, twin.token, prompt.shape[1], twin.cache, twin.rec, True).float()
    finally:
        twin.release()
        del twin, model


def _finite(error: float) -> float:
    return error if math.isfinite(error) else math.inf


def round_trip_error(weights, quantized: dict) -> str | None:
    """None where every dequantized weight is within its format's rounding of the bf16 weight it
    came from (int8: half a step, scale / 2; e4m3: half an ulp, 2^-4 of the weight, or 2^-10 of the
    scale below the smallest normal); else which projection is off and by how much. Codes or scales
    that do not stand for the model (a wrong scale, a transposed weight) fail here, whatever the
    kernels compute from them."""
    for name, w in quantized_weights(weights):
        q = quantized[w.data_ptr()]
        excess = max(_excess(w[rows], q.codes[rows], q.scale[rows]) for rows in _row_chunks(w.shape[0]))
        if excess > 0:
            return (f"{name}: dequantized weights off the bf16 ones by "
                    f"{excess:.3g} past the {dtype_label(q)} rounding bound")  # fmt: skip
    return None


def _row_chunks(rows: int, chunk: int = 2048) -> list[slice]:
    """Row blocks of a weight: the float64 copies of one block, not of the whole weight, at a time."""
    return [slice(start, start + chunk) for start in range(0, rows, chunk)]


def _excess(w: torch.Tensor, codes: torch.Tensor, scale: torch.Tensor) -> float:
    """The largest amount by which |codes * scale - w| exceeds the format's rounding bound (in float64,
    so the check adds no rounding of its own)."""
    back, wide, scale = codes.double() * scale.double(), w.double(), scale.double()
    if codes.dtype == torch.int8:
        bound = scale / 2
    else:
        bound = torch.maximum(wide.abs() / 16, scale * 2**-10)
    # w / scale is rounded to fp32 before it is rounded to a code: a value a hair under half a step
    # can round up, off by up to 2^-24 of w past the bound (2^-22: room for the scale's own rounding).
    return float(((back - wide).abs() - bound - wide.abs() * 2**-22).amax())


def dtype_label(q: QuantizedLinear) -> str:
    return "int8" if q.codes.dtype == torch.int8 else "fp8 e4m3"
