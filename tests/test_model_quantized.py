"""`rooflint model ... --weights-dtype int8|fp8` on a CPU: a tiny Llama (2 layers, hidden 64), bf16.

The quantized decode step is checked against the same step on the dequantized weights rounded to
bf16 (what the quantized model stands for); the check's gate (against that model in fp32) passes the
real path and fails a kernel that misreads its scales, and its round trip fails codes and scales
that are not the bf16 weights; the triton set's slot in Triton's interpreter (the whole triton set
runs seconds a step there: the GPU tier checks it), the floor's bytes against the weights' own
sizes, and bad input in one line. Timing is never asserted.
"""

from __future__ import annotations

import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_llama import TINY_LLAMA

from rooflint.core.errors import UserError
from rooflint.kernels.scaled_gemm.formats import QMAX
from rooflint.models import llama
from rooflint.models import quantized_weights as Q
from rooflint.models.base import Phase, build
from rooflint.models.llama_kernels import make_llama_kernel_set
from rooflint.models.rows import total_cost
from rooflint.models.runner import Runner

pytest.importorskip("transformers", reason="the model tests need transformers")

TINY = TINY_LLAMA
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def loaded():
    return build(llama.Llama({"tiny": TINY}), "tiny", torch.bfloat16, CPU, seed=0)


def kernel_set(name, loaded, weights_dtype):
    kernels = make_llama_kernel_set(name, torch.bfloat16, CPU, loaded.dims.head_dim, TINY["rms_norm_eps"])
    Q.attach(kernels, loaded.weights, weights_dtype)
    return kernels


@settings(max_examples=15, deadline=None)
@given(
    rows=st.integers(1, 8), k=st.integers(1, 40), spread=st.floats(1e-3, 1e3), seed=st.integers(0, 2**16),
    weights_dtype=st.sampled_from(["int8", "fp8"]),
)  # fmt: skip
def test_round_trip_is_within_half_a_code_of_each_channel(rows, k, spread, seed, weights_dtype):
    w = torch.randn((rows, k), generator=torch.Generator().manual_seed(seed)) * spread
    q = Q.quantize_linear(w, weights_dtype)
    assert q.codes.dtype == Q.CODE_DTYPES[weights_dtype] and q.scale.shape == (rows, 1)
    amax = w.abs().amax(dim=1, keepdim=True)
    torch.testing.assert_close(q.scale, amax / QMAX[q.codes.dtype])  # symmetric, per output channel
    back = q.codes.double() * q.scale.double()
    if weights_dtype == "int8":
        bound = q.scale.double() / 2 * (1 + 1e-6)  # round to nearest: half a step
    else:  # e4m3: 3 mantissa bits, half an ulp 2^-4 of the value, or of the smallest normal 2^-6
        bound = torch.maximum(w.abs().double() / 16, q.scale.double() * 2**-10) * (1 + 1e-6)
    assert bool(((back - w.double()).abs() <= bound).all())


@pytest.mark.parametrize("weights_dtype", ["int8", "fp8"])
def test_a_quantized_decode_step_is_the_dequantized_bf16_model(loaded, weights_dtype):
    """eager (dequantize, then F.linear) against the bf16 model whose projections hold the dequantized
    weights: the same bf16 numbers in the same ops, so the same logits."""
    kernels = kernel_set("eager", loaded, weights_dtype)
    runner = Runner(loaded, kernels, 2, 8, 2)
    prompt = torch.randint(0, TINY["vocab_size"], (2, 8), generator=torch.Generator().manual_seed(1))
    got = Q.decode_logits(runner, prompt)
    head = loaded.weights.head
    originals = [w.clone() for w in Q.decode_linear_weights(loaded.weights)]
    try:
        for w in Q.decode_linear_weights(loaded.weights):
            w.copy_(kernels.quantized[w.data_ptr()].dequantized(torch.bfloat16))
        # The head by a tensor of its own: where it is tied, the embedding stays the bf16 table.
        if head.data_ptr() in kernels.quantized:
            loaded.weights.head = kernels.quantized[head.data_ptr()].dequantized(torch.bfloat16)
        assert head.data_ptr() in kernels.quantized
        kernels.quantized = {}
        want = Q.decode_logits(runner, prompt)
    finally:
        loaded.weights.head = head
        for w, original in zip(Q.decode_linear_weights(loaded.weights), originals):
            w.copy_(original)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("weights_dtype", ["int8", "fp8"])
def test_triton_decode_slots_run_the_weight_only_kernel(loaded, weights_dtype):
    """The triton set's linear and gate/up slots on a decode step's rows (interpreter) against the
    float64 product with the dequantized weight."""
    kernels = kernel_set("triton", loaded, weights_dtype)
    assert "weight_only_gemm" in kernels.plan["weights"]
    layer = loaded.weights.layers[0]
    x = torch.randn((3, TINY["hidden_size"]), generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    for w, call in ((layer.qkv_w, lambda: kernels.linear(x, layer.qkv_w, None)),
                    (layer.gate_up_w, lambda: torch.cat(kernels.gate_up(x, layer.gate_up_w, None, TINY["intermediate_size"]), 1))):  # fmt: skip # noqa: E501
        q = kernels.quantized[w.data_ptr()]
        want = x.double() @ (q.codes.double() * q.scale.double()).T
        torch.testing.assert_close(call().double(), want, rtol=1e-2, atol=1e-2)


def prompt_of(seed: int, batch: int = 2, tokens: int = 8) -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], (batch, tokens), generator=torch.Generator().manual_seed(seed))


def misreading_kernel(monkeypatch, weight, factor=2.0):
    """The set's quantized projections as a kernel that reads ``weight``'s scales ``factor`` times
    too large (the reference model runs plain F.linear, so only the set sees it)."""
    real = Q.quantized_linear

    def misread(kind, x, q, b=None, residual=None):
        if q.codes.data_ptr() == weight.codes.data_ptr():
            q = Q.QuantizedLinear(q.codes, q.scale * factor)
        return real(kind, x, q, b, residual)

    monkeypatch.setattr(Q, "quantized_linear", misread)


@pytest.mark.parametrize("weights_dtype", ["int8", "fp8"])
def test_the_gate_passes_the_quantized_kernels_and_reports_the_formats_drift(loaded, weights_dtype):
    runner = Runner(loaded, kernel_set("eager", loaded, weights_dtype), 1, 8, 2)
    check = Q.check_decode(runner, prompt_of(3, 1))
    assert check.passed and check.round_trip is None, check.describe()
    # eager is the dequantized bf16 model op for op: its error is the reference's own
    assert check.rel_error == check.reference_error and check.tolerance == max(0.05, 1.25 * check.reference_error)
    assert check.drift > 2 * check.rel_error  # the format moves the logits more than the kernels' rounding
    assert f"{weights_dtype} weights move the logits {check.drift:.1%} from bf16" in check.describe()
    assert runner.kernels.quantized  # restored after the bf16-weights step
    assert Q.check_decode(Runner(loaded, kernel_set("eager", loaded, None), 1, 8, 2), prompt_of(3, 1)) is None


def test_every_side_of_the_check_decodes_the_token_the_sets_prefill_picked(loaded, monkeypatch):
    """The set's prefill picks the step's input through its quantized head, the references' through
    bf16 weights: at a near tie their argmaxes differ. A row fed another token would be another
    token's logits, an error no kernel made; every side decodes the set's pick instead."""
    kernels = kernel_set("eager", loaded, "fp8")
    sample = kernels.sample

    def flipped(logits, tokens, token):  # row 0 takes the runner-up, as a flipped near tie would
        sample(logits, tokens, token)
        token[0, 0] = int(logits[0].float().topk(2).indices[1])

    monkeypatch.setattr(kernels, "sample", flipped)
    check = Q.check_decode(Runner(loaded, kernels, 2, 8, 2), prompt_of(3))
    assert check.passed and check.rel_error == check.reference_error, check.describe()
    assert check.drift < 0.5, check.describe()  # the bf16-weights run decoded the same token


@pytest.mark.parametrize("weights_dtype", ["int8", "fp8"])
def test_a_kernel_that_misreads_the_scales_fails_the_gate(loaded, monkeypatch, weights_dtype):
    kernels = kernel_set("eager", loaded, weights_dtype)
    misreading_kernel(monkeypatch, kernels.quantized[loaded.weights.layers[0].down_w.data_ptr()])
    check = Q.check_decode(Runner(loaded, kernels, 1, 8, 2), prompt_of(3, 1))
    assert not check.passed and check.rel_error > check.tolerance and check.round_trip is None
    assert "do not compute the dequantized model" in check.describe()


@pytest.mark.parametrize("weights_dtype", ["int8", "fp8"])
def test_a_scale_off_by_two_fails_the_round_trip_naming_the_projection(loaded, weights_dtype):
    quantized = Q.quantize_model(loaded.weights, weights_dtype)
    assert Q.round_trip_error(loaded.weights, quantized) is None
    w = loaded.weights.layers[1].o_w
    q = quantized[w.data_ptr()]
    channel = int(q.scale.argmax())  # the channel with the largest weights: 2x its scale is far off
    doubled = q.scale.index_fill(0, torch.tensor([channel]), 2 * float(q.scale[channel]))
    quantized[w.data_ptr()] = Q.QuantizedLinear(q.codes, doubled)
    assert "layer 1 o_proj: dequantized weights off" in Q.round_trip_error(loaded.weights, quantized)


def test_the_check_fails_on_codes_and_scales_that_are_not_the_bf16_weights(loaded):
    """The gate follows the dequantized weights wherever they are; the round trip ties them to bf16."""
    kernels = kernel_set("eager", loaded, "int8")
    w = loaded.weights.layers[0].gate_up_w
    q = kernels.quantized[w.data_ptr()]
    kernels.quantized[w.data_ptr()] = Q.QuantizedLinear(q.codes, q.scale * 2)
    check = Q.check_decode(Runner(loaded, kernels, 1, 8, 2), prompt_of(4, 1))
    assert check.rel_error <= check.tolerance and not check.passed
    assert "layer 0 gate_up_proj: dequantized weights off" in check.describe()


def test_without_room_for_fp32_the_reference_is_the_dequantized_model_in_the_runs_dtype(loaded):
    check = Q.check_decode(Runner(loaded, kernel_set("eager", loaded, "int8"), 1, 20, 2), prompt_of(5, 1, 20), False)
    assert check.passed and check.reference_error is None and check.rel_error == 0.0  # the same bf16 ops
    assert check.tolerance == 0.05 and "no fp32 reference" in check.describe()


def test_the_int8_head_runs_quantized_on_decode_rows_and_the_tied_embedding_stays_bf16(loaded):
    kernels = kernel_set("triton", loaded, "int8")
    head = loaded.weights.head
    assert head.data_ptr() == loaded.weights.embed.data_ptr()  # tied: one pointer, looked up by the head only
    q = kernels.quantized[head.data_ptr()]
    x = torch.randn((3, TINY["hidden_size"]), generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    want = x.double() @ (q.codes.double() * q.scale.double()).T
    torch.testing.assert_close(kernels.lm_head(x, head).double(), want, rtol=1e-2, atol=1e-2)
    ids = torch.tensor([[1, 7]])
    assert torch.equal(kernels.token_embedding(ids, loaded.weights.embed), loaded.weights.embed[[1, 7]])
    rows = torch.randn((Q.MAX_ROWS + 1, TINY["hidden_size"])).to(torch.bfloat16)  # a prefill: the bf16 head
    torch.testing.assert_close(kernels.lm_head(rows, head), rows @ head.T)


def test_other_sets_keep_bf16_weights_and_say_so(loaded):
    kernels = kernel_set("compile", loaded, "int8")
    assert not kernels.quantized and kernels.plan["weights"].startswith("bf16")
    for kind, weights_dtype in (("eager", "int8"), ("triton", "fp8")):
        plan = kernel_set(kind, loaded, weights_dtype).plan["weights"]
        assert "down and lm_head" in plan and "embedding and prefill bf16" in plan, plan
        assert ("CUDA kernel" in plan) == (kind == "triton"), plan


@pytest.mark.parametrize("weights_dtype", ["int8", "fp8"])
def test_decode_floor_counts_one_byte_a_weight_and_the_scales(loaded, weights_dtype):
    dims, quantized = loaded.dims, types.SimpleNamespace(weights_dtype=weights_dtype)
    decode, prefill = Phase("decode", 8, 1, 64), Phase("prefill", 8, 16, 16)
    costs = llama.llama_costs(dims, decode, "bf16")
    shrunk = Q.decode_costs(costs, dims, decode, "bf16", quantized)
    # from the weights themselves: a bf16 weight is 2 bytes, a code 1, plus an fp32 scale per row
    expected = sum(w.numel() - 4 * w.shape[0] for _, w in Q.quantized_weights(loaded.weights))
    assert total_cost(costs).bytes - total_cost(shrunk).bytes == expected
    head = loaded.weights.head
    assert costs["lm_head"].bytes - shrunk["lm_head"].bytes == head.numel() - 4 * head.shape[0]
    assert shrunk["embedding"] == costs["embedding"]
    assert Q.decode_costs(costs, dims, decode, "bf16", types.SimpleNamespace()) == costs  # a bf16 set
    assert Q.decode_costs(costs, dims, prefill, "bf16", quantized) == costs
    assert Q.decode_costs(costs, dims, Phase("decode", 32, 1, 64), "bf16", quantized) == costs  # > 16 rows


def test_weights_dtype_is_refused_in_one_line_where_it_cannot_run():
    assert Q.resolve(None, "bf16") is None and Q.resolve("bf16", "bf16") is None
    assert Q.resolve("fp8", "bf16") == "fp8"
    with pytest.raises(UserError, match="needs --dtype bf16"):
        Q.resolve("int8", "fp32")
    with pytest.raises(UserError, match="Llama-family only"):
        Q.resolve("int8", "bf16", "gpt2")


def test_a_bad_weights_dtype_is_one_line_and_exit_2():
    from typer.testing import CliRunner

    from rooflint.cli.app import app

    done = CliRunner().invoke(app, ["model", "llama-3.2-1b", "--weights-dtype", "int4", "--device", "cpu"])
    lines = done.stderr.strip().splitlines()
    assert done.exit_code == 2 and len(lines) == 1 and "'int4'" in lines[0] and "bf16, int8, fp8" in lines[0]


def test_a_run_whose_kernel_misreads_a_scale_fails_the_set(tmp_path, monkeypatch):
    from rooflint.core.specs import measured_spec
    from rooflint.models.model_run import run_model
    from rooflint.models.outcome import ModelRequest
    from rooflint.outputs.results import FAILED

    spec = measured_spec("cpu", "CPU (test)", 10.0, {"tensor_bf16_tflops": 0.1, "cuda_fp32_tflops": 0.1}, "test")
    real = Q.quantized_linear  # seq 20: the prefill checked against HF runs the bf16 weights (> 16 rows)
    monkeypatch.setattr(Q, "quantized_linear", lambda kind, x, q, b=None, residual=None: real(
        kind, x, Q.QuantizedLinear(q.codes, q.scale * 2), b, residual))  # fmt: skip
    request = ModelRequest(model="llama", model_spec=llama.Llama({"tiny": TINY}), config="tiny", batch=1, seq=20,
                           prompt=4, new_tokens=2, dtype="bf16", weights_dtype="int8", kernels=["eager"], layers=1,
                           out=tmp_path, device="cpu", spec=spec, rep_ms=0, plots=False)  # fmt: skip
    outcome = run_model(request)
    (result,) = outcome.sets
    assert result.status == FAILED and "int8 decode logits rel err" in result.message
    assert "do not compute the dequantized model" in result.message
    assert "weights=int8 per output channel" in result.plan
    assert dict(item.split("=", 1) for item in result.plan.split("; "))["weights"].startswith("int8")


def test_swiglu_in_the_gate_up_gemm_changes_the_costs_and_the_forward_only_where_it_runs(loaded, monkeypatch):
    """The gate_up_swiglu fusion (the CUDA kernel's SwiGLU epilogue, a GPU's): the decode step's costs
    lose the swiglu op and half of gate/up's write, and the forward calls the fused slot instead of
    gate_up and silu_mul. Here the fused slot is computed from the same quantized GEMM on the CPU, so the
    logits must match the unfused step's."""
    kernels = kernel_set("triton", loaded, "int8")
    decode = Phase("decode", 2, 1, 16)
    assert kernels.fusions(2, True) == frozenset()  # a CPU: the CUDA kernel cannot run
    prompt = torch.randint(0, TINY["vocab_size"], (2, 8), generator=torch.Generator().manual_seed(5))
    unfused = Q.decode_logits(Runner(loaded, kernels, 2, 8, 2), prompt)

    calls = []

    def swiglu_on_cpu(x, q, b=None):
        calls.append(x.shape)
        both = Q.quantized_linear("triton", x, q, b).float()
        ffn = both.shape[1] // 2
        return (torch.nn.functional.silu(both[:, :ffn]) * both[:, ffn:]).to(x.dtype)

    monkeypatch.setattr(Q, "quantized_swiglu", swiglu_on_cpu)
    monkeypatch.setattr("rooflint.kernels.weight_only_gemm.cuda.why_not_weight", lambda *args, **kwargs: None)
    assert kernels.fusions(2, True) == {"gate_up_swiglu"} and kernels.fusions(2, False) == frozenset()
    assert kernels.fusions(Q.MAX_ROWS + 1, True) == frozenset()  # above the kernel's rows
    fused = Q.decode_logits(Runner(loaded, kernels, 2, 8, 2), prompt)
    assert len(calls) == TINY["num_hidden_layers"]  # the decode step's layers (the prefill of 16 rows is not fused)
    torch.testing.assert_close(fused, unfused, rtol=2e-2, atol=2e-2)

    dims = loaded.dims
    plain = llama.SPEC.op_costs(dims, decode, "bf16")
    with_fusion = llama.SPEC.op_costs(dims, decode, "bf16", frozenset({"gate_up_swiglu"}))
    assert "swiglu" in plain and "swiglu" not in with_fusion
    written = dims.layers * decode.rows * dims.ffn * 2  # [rows, 2 ffn] bf16 written as [rows, ffn]
    assert plain["gate_up_proj"].bytes - with_fusion["gate_up_proj"].bytes == written
    assert total_cost(plain).bytes - total_cost(with_fusion).bytes == written + plain["swiglu"].bytes


def test_the_bf16_triton_step_fuses_swiglu_into_gate_up_where_the_held_kernel_takes_it(loaded, monkeypatch):
    """Without quantization the triton set's gate_up_swiglu runs skinny_pdl.cu's SwiGLU epilogue (a
    GPU's): prepare() gives the set the gate/up weight that decides it, the plan names the fusion, and
    the forward calls the fused slot on decode rows only. Here the fused slot is the same product
    computed on the CPU, so the logits must match the unfused step's."""
    from rooflint.kernels.gelu_linear import skinny_pdl

    kernels = kernel_set("triton", loaded, None)
    prompt = torch.randint(0, TINY["vocab_size"], (2, 8), generator=torch.Generator().manual_seed(6))
    assert kernels.fusions(2, True) == frozenset()  # prepare() not called: no weight to decide by
    kernels.prepare(loaded.weights)
    assert kernels.gate_up_w is loaded.weights.layers[0].gate_up_w
    assert kernels.fusions(2, True) == frozenset()  # a CPU: the CUDA kernel cannot run
    assert "decode rows" not in kernels.describe()  # no decode fusion (the prefill's GEMM is Triton's: it runs)
    unfused = Q.decode_logits(Runner(loaded, kernels, 2, 8, 2), prompt)

    calls = []

    def swiglu_on_cpu(x, w, b=None, pdl=False, rms=None):
        assert rms is None  # no norm folded unless ROOFLINT_NORM_IN_GEMM asks
        calls.append(x.shape)
        both = torch.nn.functional.linear(x, w, b).float()  # rounded to bf16 first, as the kernel's gate and up
        ffn = both.shape[1] // 2
        return (torch.nn.functional.silu(both[:, :ffn]) * both[:, ffn:]).to(x.dtype)

    monkeypatch.setattr(skinny_pdl, "swiglu", swiglu_on_cpu)
    monkeypatch.setattr(skinny_pdl, "why_not_swiglu", lambda m, w: None if m <= 8 else "two X tiles")
    assert kernels.fusions(2, True) == {"gate_up_swiglu"} and kernels.fusions(2, False) == frozenset()
    assert kernels.fusions(9, True) == frozenset()  # where the held kernel does not take the rows
    assert "fusions=gate_up_swiglu at <= 8 decode rows" in kernels.describe()
    fused = Q.decode_logits(Runner(loaded, kernels, 2, 8, 2), prompt)
    assert len(calls) == TINY["num_hidden_layers"]  # the decode step's layers, not the prefill's 16 rows
    torch.testing.assert_close(fused, unfused, rtol=2e-2, atol=2e-2)


def test_rope_in_the_quantized_qkv_gemm_replaces_the_rope_kernel_only_where_it_runs(loaded, monkeypatch):
    """The qkv_rope fusion with quantized weights (the CUDA weight-only kernel's RoPE and K/V-append
    epilogue, a GPU's): attach() gives the set the QKV weight that decides it, the plan names it, and a
    decode step calls the fused slot instead of the projection and the rope kernel, writing the cache
    itself. Here the fused slot is the float64 reference on the dequantized weight, on the CPU, so the
    logits must match the unfused step's."""
    from rooflint.kernels.gelu_linear import skinny_pdl
    from rooflint.kernels.weight_only_gemm import cuda

    kernels = kernel_set("triton", loaded, "int8")
    kernels.prepare(loaded.weights)
    assert kernels.qkv_quantized is kernels.quantized[loaded.weights.layers[0].qkv_w.data_ptr()]
    assert kernels.fusions(2, True) == frozenset()  # a CPU: the CUDA kernel cannot run
    prompt = torch.randint(0, TINY["vocab_size"], (2, 8), generator=torch.Generator().manual_seed(7))
    unfused = Q.decode_logits(Runner(loaded, kernels, 2, 8, 2), prompt)

    calls = []

    def qkv_rope_on_cpu(x, q, b, cos, sin, start, tokens, width, d, append=None):
        calls.append((x.shape, start, width, d, append is not None))
        return skinny_pdl.qkv_rope_reference(x, q.dequantized(torch.float64), b, cos, sin, start, tokens, width, d,
                                             append)  # fmt: skip

    monkeypatch.setattr(Q, "quantized_qkv_rope", qkv_rope_on_cpu)
    monkeypatch.setattr(cuda, "why_not_weight", lambda *args, **kwargs: None)
    assert kernels.fusions(2, True) == {"gate_up_swiglu", "qkv_rope"}
    assert kernels.fusions(Q.MAX_ROWS + 1, True) == frozenset() and kernels.fusions(2, False) == frozenset()
    assert "qkv_rope at <= 16 decode rows" in kernels.describe()
    monkeypatch.setattr(Q, "quantized_swiglu", lambda x, q, b=None: _swiglu_on_cpu(x, q, b))
    fused = Q.decode_logits(Runner(loaded, kernels, 2, 8, 2), prompt)
    heads, kv_heads, d = loaded.weights.heads, loaded.weights.kv_heads, loaded.weights.head_dim
    # the decode step's layers, each at the prompt's end, the cache appended by the kernel itself
    assert calls == [((2, TINY["hidden_size"]), 8, (heads + kv_heads) * d, d, True)] * TINY["num_hidden_layers"]
    torch.testing.assert_close(fused, unfused, rtol=2e-2, atol=2e-2)
    # with a head_dim the epilogue cannot pair (not a multiple of 16), the rope kernel stays
    monkeypatch.setattr(kernels, "rope_dims", (heads, kv_heads, 24))
    assert "qkv_rope" not in kernels.fusions(2, True)


def _swiglu_on_cpu(x, q, b=None):
    both = Q.quantized_linear("triton", x, q, b).float()
    ffn = both.shape[1] // 2
    return (torch.nn.functional.silu(both[:, :ffn]) * both[:, ffn:]).to(x.dtype)
