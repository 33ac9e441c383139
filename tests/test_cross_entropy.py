"""cross_entropy: the Triton kernel and the chunked fused-linear form in the interpreter against float64
over odd shapes and every dtype, the PyTorch forms, the cost model, and the Liger and quack adapters
against fakes with the libraries' signatures (Liger's writing the gradient over its input)."""

from __future__ import annotations

import pytest
import torch
from fake_libraries import install
from kernel_checks import assert_variant_matches_reference

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.cross_entropy import triton as ce_triton


# one token, a vocabulary of one and of a prime size, one past a power of two
@pytest.mark.parametrize("tokens,vocab", [(1, 1), (1, 2), (7, 101), (5, 1025), (3, 5003)])
@pytest.mark.parametrize("dtype", get_family("cross_entropy").dtypes)
def test_triton_from_logits_matches_float64(tokens, vocab, dtype):
    assert_variant_matches_reference("cross_entropy", "triton", {"tokens": tokens, "vocab": vocab, "hidden": 0}, dtype)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_many_tiles_carry_the_running_max_and_sum(dtype):
    # 64-wide tiles over 1000 words: 16 tiles, the last partial; logits far from zero (a max carried
    # wrong overflows exp), and the target in the last, partial tile for one token.
    family = get_family("cross_entropy")
    params = {"tokens": 4, "vocab": 1000, "hidden": 0}
    case = family.build_case("custom", params, dtype, torch.device("cpu"))
    case.inputs["logits"] = (case["logits"].float() * 4 + 300).to(case["logits"].dtype)
    case.inputs["target"][0] = 999
    logits, target = case["logits"], case["target"]
    losses, grad = torch.empty(4), torch.full_like(logits, float("nan"))
    ce_triton.triton_cross_entropy(logits, target, grad, losses, max_tile=64)
    verdict = check(family, dtype, (losses.mean(), grad), family.reference(case.inputs, params))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("variant", ["triton", "triton_chunked"])
@pytest.mark.parametrize("dtype", get_family("cross_entropy").dtypes)
def test_the_head_fused_forms_match_float64(monkeypatch, variant, dtype):
    # 2^12 bytes of logits a chunk: 20 tokens of 101 bf16 words, so 37 tokens run as two chunks
    # (one partial) and dW accumulates across them.
    monkeypatch.setattr(ce_triton, "CHUNK_BYTES", 2**12)
    assert 1 < 37 / ce_triton.chunk_tokens(101, torch.bfloat16) <= 2
    assert_variant_matches_reference("cross_entropy", variant, {"tokens": 37, "vocab": 101, "hidden": 24}, dtype)


def test_the_chunked_form_needs_hidden_states():
    family = get_family("cross_entropy")
    case = family.build_case("custom", {"tokens": 2, "vocab": 8, "hidden": 0}, "fp32", torch.device("cpu"))
    with pytest.raises(VariantSkipped, match="hidden > 0"):
        family.variants["triton_chunked"].build(case)


@pytest.mark.parametrize("variant", ["eager", "eager_unfused", "compile_unfused", "compile_builtin"])
@pytest.mark.parametrize("hidden", [0, 16])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_torch_variants_match_float64(variant, hidden, dtype):
    assert_variant_matches_reference("cross_entropy", variant, {"tokens": 9, "vocab": 77, "hidden": hidden}, dtype)


def test_cost_of_the_two_forms():
    cost = get_family("cross_entropy").cost
    logits = cost({"tokens": 8192, "vocab": 128256, "hidden": 0}, "bf16")
    assert logits.bytes == 2 * 8192 * 128256 * 2 + 8192 * 8 + 4
    assert logits.tensor_flops == 0
    head = cost({"tokens": 8192, "vocab": 128256, "hidden": 4096}, "bf16")
    assert head.tensor_flops == 6 * 8192 * 128256 * 4096  # three GEMMs
    # the floor never counts the logits: the fused-linear forms keep them on chip
    assert head.bytes == 2 * (8192 + 128256) * 4096 * 2 + 8192 * 8 + 4


# ----------------------------------------------------------------- adapters, against fake libraries


class _InPlaceCrossEntropy(torch.autograd.Function):
    """Liger's contract: the forward writes the gradient over its input and returns the mean loss."""

    @staticmethod
    def forward(ctx, logits, target):
        z = logits.detach().float()
        loss = (torch.logsumexp(z, -1) - z.gather(1, target[:, None]).squeeze(1)).mean()
        grad = torch.softmax(z, -1)
        grad[torch.arange(len(target)), target] -= 1
        logits.data.copy_(grad / len(target))
        ctx.save_for_backward(logits.detach())
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        (grad,) = ctx.saved_tensors
        return grad * grad_output, None


def _linear_ce(x, weight, target, *rest, **options):
    return torch.nn.functional.cross_entropy(torch.nn.functional.linear(x, weight).float(), target)


def fake_liger(monkeypatch):
    def liger_cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                            reduction="mean", **options):  # fmt: skip
        return _InPlaceCrossEntropy.apply(input, target)

    install(
        monkeypatch,
        "liger_kernel.transformers.functional",
        liger_cross_entropy=liger_cross_entropy,
        liger_fused_linear_cross_entropy=_linear_ce,
    )


def fake_quack(monkeypatch):
    install(
        monkeypatch,
        "quack.cross_entropy",
        cross_entropy=lambda x, target, lse_partial=None, weight=None, ignore_index=-100, reduction="mean": (
            torch.nn.functional.cross_entropy(x.float(), target)
        ),
    )
    install(monkeypatch, "quack.linear_cross_entropy", chunked_linear_cross_entropy=_linear_ce)


@pytest.mark.parametrize("hidden", [0, 16])
@pytest.mark.parametrize(("variant", "fake"), [("liger", fake_liger), ("quack", fake_quack)])
def test_adapters_give_loss_and_gradients_and_leave_the_inputs_alone(monkeypatch, variant, fake, hidden):
    fake(monkeypatch)
    family = get_family("cross_entropy")
    # 112-byte rows: whole 16-byte vectors for quack; 8 tokens, the multiple its fused-linear form takes
    params = {"tokens": 8, "vocab": 56, "hidden": hidden}
    case = family.build_case("custom", params, "bf16", torch.device("cpu"))
    before = {name: tensor.clone() for name, tensor in case.inputs.items()}
    call = family.variants[variant].build(case)
    first = call()
    call()  # the engine calls again (to measure memory) before it checks the first output
    verdict = check(family, "bf16", first, family.reference(case.inputs, params))
    assert verdict.passed, verdict.message
    for name, tensor in case.inputs.items():
        assert torch.equal(tensor, before[name]), name


def test_quack_skips_a_row_of_no_whole_16_byte_vectors_with_the_reason(monkeypatch):
    fake_quack(monkeypatch)
    family = get_family("cross_entropy")
    case = family.build_case("custom", {"tokens": 3, "vocab": 50, "hidden": 0}, "bf16", torch.device("cpu"))
    with pytest.raises(VariantSkipped, match=r"50 torch.bfloat16 elements \(100 bytes\)"):
        family.variants["quack"].build(case)


def test_quacks_fused_linear_form_is_skipped_in_fp32(monkeypatch):
    fake_quack(monkeypatch)
    family = get_family("cross_entropy")
    case = family.build_case("custom", {"tokens": 2, "vocab": 8, "hidden": 4}, "fp32", torch.device("cpu"))
    with pytest.raises(VariantSkipped, match="fp16 and bf16"):
        family.variants["quack"].build(case)


def test_quacks_chunks_are_its_default_rows_and_a_ragged_last_one_padded_to_128():
    from rooflint.kernels.cross_entropy.library import quack_chunk_rows

    assert quack_chunk_rows(8192) == {4096}
    assert quack_chunk_rows(300) == {384}
    assert quack_chunk_rows(4100) == {4096, 128}


def _quack_recording(monkeypatch, scaled_exp_supported):
    """quack with its scaled-exp eligibility answered by the test; the options each call got."""
    calls = []

    def chunked_linear_cross_entropy(x, weight, target, *rest, **options):
        calls.append(options)
        return _linear_ce(x, weight, target)

    install(
        monkeypatch,
        "quack.linear_cross_entropy",
        chunked_linear_cross_entropy=chunked_linear_cross_entropy,
        scaled_exp_lce_supported=lambda x, weight, chunk_size, reduction: scaled_exp_supported,
    )
    return calls


@pytest.mark.parametrize(("hidden", "options"), [(128, {"use_scaled_exp": False}), (64, {})])
def test_quacks_scaled_exp_pipeline_is_left_only_where_a_chunk_s_rows_equal_the_hidden_size(
    monkeypatch, hidden, options
):
    """quack 0.6.5's scaled-exp pipeline raises "m == n makes row/col inference ambiguous" when a
    chunk's rows (8 tokens pad to one 128-row tile) equal the hidden size; there the adapter asks for
    quack's base pipeline, and everywhere else it passes quack's defaults."""
    calls = _quack_recording(monkeypatch, scaled_exp_supported=True)
    family = get_family("cross_entropy")
    params = {"tokens": 8, "vocab": 56, "hidden": hidden}
    case = family.build_case("custom", params, "bf16", torch.device("cpu"))
    first = family.variants["quack"].build(case)()
    assert calls == [options]
    assert check(family, "bf16", first, family.reference(case.inputs, params)).passed


@pytest.mark.parametrize(("scaled", "skipped"), [(False, True), (True, False)])
def test_quacks_base_pipeline_skips_a_token_count_of_no_whole_8(monkeypatch, scaled, skipped):
    """quack's base pipeline asserts tokens % 8 == 0 (an AssertionError with no message on the GPU):
    a skip that says so; its scaled-exp pipeline pads the last chunk and takes any count."""
    _quack_recording(monkeypatch, scaled_exp_supported=scaled)
    family = get_family("cross_entropy")
    case = family.build_case("custom", {"tokens": 6, "vocab": 56, "hidden": 16}, "bf16", torch.device("cpu"))
    if skipped:
        with pytest.raises(VariantSkipped, match="multiple of 8 tokens.*6 is not"):
            family.variants["quack"].build(case)
    else:
        assert callable(family.variants["quack"].build(case))


def test_quacks_fused_linear_form_skips_a_vocabulary_of_no_whole_16_byte_rows(monkeypatch):
    """A vocabulary of 5003 bf16 logits a row failed inside the CuTe DSL's compiler on an H200 (its
    cp.async copies take 4, 8 or 16 bytes): the skip names the row."""
    _quack_recording(monkeypatch, scaled_exp_supported=False)
    family = get_family("cross_entropy")
    case = family.build_case("custom", {"tokens": 8, "vocab": 5003, "hidden": 16}, "bf16", torch.device("cpu"))
    with pytest.raises(VariantSkipped, match=r"5003 torch.bfloat16 elements \(10006 bytes\)"):
        family.variants["quack"].build(case)
