"""A Llama decode step's RMSNorms folded into the GEMMs after them (ROOFLINT_NORM_IN_GEMM): the
forward's plumbing (the stream read by the folding GEMM, the residual adds moved into the GEMMs
before it, the final norm), the costs it moves, the weight fold, the switch's refusal, and the held
kernel's grid with the shared tile (shared_pairs). The kernel itself is checked on a GPU
(tests/gpu/test_gpu_skinny_pdl.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess

import pytest
import torch
from console_script import ROOFLINT, assert_refused, needs_console_script
from hypothesis import given
from hypothesis import strategies as st

from rooflint.core.errors import UserError
from rooflint.kernels.gelu_linear import skinny_pdl
from rooflint.models import checks, llama
from rooflint.models.base import Phase, build
from rooflint.models.cache import KVCache
from rooflint.models.llama_kernels import NORM_IN_GEMM, norm_folds

transformers = pytest.importorskip("transformers", reason="the model tests need transformers")

TINY = {
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "hidden_act": "silu",
}  # fmt: skip
QWEN = {**TINY, "model_type": "qwen2", "rope_theta": 1e6}  # biases on q, k and v
FOLDS = {"attn": {"attn_norm_in_qkv"}, "mlp": {"mlp_norm_in_gate_up"}, "both": {"attn_norm_in_qkv",
                                                                                 "mlp_norm_in_gate_up"}}  # fmt: skip


class Ops:
    """An op recorder (the forward's ``rec``) that lists the ops a step ran, in order."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self, op: str):
        self.names.append(op)
        return contextlib.nullcontext()


def decode_logits(fields, folds: set[str], monkeypatch) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """(the decode step's logits, Hugging Face's for the same tokens, the step's ops) in float64: a
    prefill of 5 tokens into the cache, then one token whose step folds ``folds``."""
    spec = llama.Llama({"tiny": fields})
    loaded = build(spec, "tiny", torch.float64, torch.device("cpu"))
    kernels = spec.kernel_set("eager", torch.float64, torch.device("cpu"), 16, spec.norm_eps(loaded.hf.config))
    plain = kernels.fusions
    monkeypatch.setattr(
        kernels, "fusions", lambda rows, decoding: plain(rows, decoding) | (folds if decoding else set())
    )
    ids = torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(7))
    cache = KVCache(3, 2, 2, 16, 16, torch.float64, "cpu")
    spec.forward(loaded.weights, kernels, ids[:, :5], 0, cache, Ops())
    ops = Ops()
    ours = spec.forward(loaded.weights, kernels, ids[:, 5:], 5, cache, ops, last_only=True)
    return ours.reshape(2, -1), checks.hf_logits(loaded.hf, ids)[:, -1], ops.names


@pytest.mark.parametrize("fold", ["attn", "mlp", "both"])
@pytest.mark.parametrize("fields", [TINY, QWEN], ids=["llama", "qwen2"])
def test_a_step_with_folded_norms_keeps_its_logits(fields, fold, monkeypatch):
    """The stream the folding GEMM reads is the one the norm kernel would have read: the GEMM before it
    added its output in its epilogue (o before gate/up, down before the next QKV and the final norm)."""
    ours, theirs, ops = decode_logits(fields, FOLDS[fold], monkeypatch)
    plain, _, plain_ops = decode_logits(fields, set(), monkeypatch)
    assert checks.relative_error(ours, plain) < 1e-12  # the same sums in float64, in other kernels
    assert checks.relative_error(ours, theirs) < 1e-6  # HF's eager softmax and RMSNorm run in fp32
    layers = fields["num_hidden_layers"]
    assert plain_ops.count("add_rms_norm") == 2 * layers and plain_ops.count("rms_norm") == 1
    # the norms left: attn -> each layer's MLP norm; mlp -> the attention's after the first, and the final
    assert ops.count("add_rms_norm") == {"attn": layers, "mlp": layers, "both": 0}[fold], ops
    assert ops.count("rms_norm") == 1  # the final norm alone (attn, both), or the first layer's (mlp)
    assert ops[-2:] == ["rms_norm" if fold != "mlp" else "add_rms_norm", "lm_head"], ops


def test_folded_norm_costs_move_the_norms_bytes_to_the_gemms():
    spec = llama.Llama({"tiny": TINY})
    dims = spec.dims(spec.hf_config("tiny"))
    phase = Phase("decode", batch=4, tokens=1, context=64)
    plain = spec.op_costs(dims, phase, "bf16")
    rows, d, n, size = 4, dims.hidden, dims.layers, 2
    for fold, names in FOLDS.items():
        folded = spec.op_costs(dims, phase, "bf16", frozenset(names))
        adds = {"attn": ["down_proj"], "mlp": ["o_proj"], "both": ["down_proj", "o_proj"]}[fold]
        for name in adds:  # the GEMM before a folded norm reads the stream to add to it
            assert folded[name].bytes - plain[name].bytes == n * rows * d * size, (fold, name)
        for name in ("qkv_proj", "gate_up_proj"):  # the folding GEMM reads the stream where it read h
            assert folded[name].bytes == plain[name].bytes
        # each folded norm read x and r and wrote r and h; the step moves fewer bytes in all
        assert sum(c.bytes for c in folded.values()) < sum(c.bytes for c in plain.values()), fold
    both = spec.op_costs(dims, phase, "bf16", frozenset(FOLDS["both"]))
    assert "add_rms_norm" not in both and both["rms_norm"].bytes < plain["rms_norm"].bytes * 2


def test_fold_rms_norm_is_gamma_in_ws_columns_rounded_once():
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(24, 40, generator=gen).to(torch.bfloat16)
    gamma = (torch.rand(40, generator=gen) + 0.5).to(torch.bfloat16)
    folded = skinny_pdl.fold_rms_norm(gamma, w)
    assert folded.dtype == w.dtype and folded.is_contiguous()
    assert torch.equal(folded, (w.double() * gamma.double()).to(torch.bfloat16))


def test_the_triton_set_folds_each_weight_and_gamma_once():
    # Its __init__ needs a GPU; the folding needs only the weights. A graph replays the folded copy made
    # on the first (uncaptured) step, so a second call must hand back that very tensor.
    from rooflint.models.llama_kernels import LlamaTriton

    kernels = object.__new__(LlamaTriton)
    kernels._folds, kernels.eps = {}, 1e-5
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(24, 40, generator=gen).to(torch.bfloat16)
    gamma, other = ((torch.rand(40, generator=gen) + 0.5).to(torch.bfloat16) for _ in range(2))
    folded, eps = kernels._rms_folded(w, gamma)
    assert eps == 1e-5 and torch.equal(folded, skinny_pdl.fold_rms_norm(gamma, w))
    assert kernels._rms_folded(w, gamma)[0] is folded
    assert not torch.equal(kernels._rms_folded(w, other)[0], folded)  # another norm, another copy
    assert kernels._rms_folded(w, None) == (w, None)  # no norm fused: the weight as it is
    assert len(kernels._folds) == 2


@pytest.mark.parametrize(
    "row_blocks,sms,pairs",
    [(384, 132, 132), (256, 132, 128), (1792, 132, 896), (5, 132, 3), (265, 132, 132), (264, 132, 132),
     (400, 132, 200), (660, 132, 264), (100, 132, 50)],
)  # fmt: skip
def test_shared_pairs_gives_single_row_blocks_only_after_whole_paired_waves(row_blocks, sms, pairs):
    """Llama-3.1-8B's QKV (384 row blocks): 132 pairs then 120 single blocks; its o_proj (256) and gate/up
    (1,792) all paired; at most one SM's worth of row blocks left after whole paired waves go single."""
    assert skinny_pdl.shared_pairs(row_blocks, sms) == pairs


@given(st.integers(1, 5000), st.integers(1, 200))
def test_shared_pairs_covers_every_row_block_once_and_the_busiest_sm_least(row_blocks, sms):
    pairs = skinny_pdl.shared_pairs(row_blocks, sms)
    singles = max(row_blocks - 2 * pairs, 0)
    assert 2 * pairs >= row_blocks - singles and 2 * pairs <= row_blocks + 1
    if singles:  # whole paired waves, then at most one single a SM
        assert pairs % sms == 0 and pairs > 0 and singles <= sms
    # row blocks the busiest SM streams, the blocks taken in order: never more than all-paired's
    all_paired = 2 * -(-((row_blocks + 1) // 2) // sms)
    busiest = 2 * -(-pairs // sms) + (1 if singles else 0)
    assert busiest <= all_paired


def test_launch_refuses_a_folded_norm_on_the_streamed_kernel():
    x = torch.zeros(1, 14336, dtype=torch.bfloat16)
    w = torch.zeros(16, 14336, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="a folded RMSNorm needs it"):
        skinny_pdl.launch(x, w, None, False, None, torch.empty(1, 16, dtype=torch.bfloat16), None, None, rms=1e-5)


@pytest.mark.parametrize("value,folds", [("", ()), ("0", ()), ("attn", ("attn",)), ("MLP", ("mlp",)),
                                         ("both", ("attn", "mlp"))])  # fmt: skip
def test_norm_folds_reads_the_switch(value, folds, monkeypatch):
    monkeypatch.setenv(NORM_IN_GEMM, value)
    assert norm_folds() == folds


def test_the_folded_weight_copies_are_counted_where_asked_for(monkeypatch):
    spec = llama.Llama({"tiny": TINY})
    config = spec.hf_config("tiny")
    d, layers = 64, 3
    qkv, gate_up = (4 + 2 * 2) * 16 * d, 2 * 128 * d
    for value, rows in (("0", 0), ("attn", qkv), ("mlp", gate_up), ("both", qkv + gate_up)):
        monkeypatch.setenv(NORM_IN_GEMM, value)
        assert spec.folded_weight_bytes(config, 2) == layers * rows * 2, value
    monkeypatch.setenv(NORM_IN_GEMM, "yes")
    with pytest.raises(UserError, match="valid: 0, attn, mlp, both"):
        spec.folded_weight_bytes(config, 2)


@needs_console_script
def test_a_norm_fold_that_is_not_one_of_its_words_is_refused_at_start(tmp_path):
    env = dict(os.environ, ROOFLINT_CACHE=str(tmp_path / "cache"), COLUMNS="200")
    for value, refused in (("1", True), ("qkv", True), ("both", False), ("0", False), ("", False)):
        env[NORM_IN_GEMM] = value
        done = subprocess.run([ROOFLINT, "--version"], capture_output=True, text=True, env=env, cwd=tmp_path)
        if refused:
            assert_refused(done, f"{NORM_IN_GEMM}={value!r} is not valid", "valid: 0, attn, mlp, both")
        else:
            assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "m,k,n,swiglu,takes",
    [(1, 4096, 6144, False, True), (1, 4096, 28672, False, True), (8, 2048, 8192, True, True),
     (8, 2048, 3072, False, True), (9, 2048, 3072, False, False), (1, 14336, 4096, False, False),
     (8, 768, 2304, False, False), (8, 256, 1000, True, False), (8, 1024, 1000, True, True)],
)  # fmt: skip
def test_takes_rms_names_the_held_kernels_with_a_folded_norm_build(m, k, n, swiglu, takes):
    """Llama-3.1-8B's QKV and gate/up at B=1 and Llama-3.2-1B's at B=8 have one (16 steps, 8 for SwiGLU
    without the shared tile); the streamed down projection, M > 8, GPT-2's 12 steps and 4 do not."""
    assert skinny_pdl.takes_rms(m, k, n, torch.device("cpu"), swiglu=swiglu) is takes


def test_a_folded_norm_outside_its_builds_is_refused_before_the_launch():
    x, w = torch.zeros(8, 768, dtype=torch.bfloat16), torch.zeros(32, 768, dtype=torch.bfloat16)
    out = torch.empty(8, 32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="folds an RMSNorm at M <= 8"):
        skinny_pdl._call(x, w, None, out, 32, 12, rms=1e-5)  # GPT-2's 12 steps: no such build
    with pytest.raises(ValueError, match="not M = 9"):
        skinny_pdl._call(torch.zeros(9, 768, dtype=torch.bfloat16), w, None, out, 32, 8, rms=1e-5)


@pytest.mark.parametrize("ring", [True, False])
def test_the_mlp_fold_gives_way_to_the_ring_kernels_swiglu(ring, monkeypatch):
    """Where skinny_ring.cu takes the gate/up projection (its SwiGLU epilogue, no folded-norm build), the
    MLP's norm stays a kernel of its own; the attention's fold is unaffected. Where it does not, both fold."""
    from rooflint.kernels.gelu_linear import skinny_ring

    spec = llama.Llama({"tiny": TINY})
    loaded = build(spec, "tiny", torch.bfloat16, torch.device("cpu"))
    kernels = spec.kernel_set("triton", torch.bfloat16, torch.device("cpu"), 16, spec.norm_eps(loaded.hf.config))
    kernels.prepare(loaded.weights)
    monkeypatch.setenv(NORM_IN_GEMM, "both")
    monkeypatch.setattr(skinny_ring, "pays", lambda m, k, n, device: ring)
    monkeypatch.setattr(type(kernels), "_folds_norm", lambda self, rows: True)  # the held kernel's checks: a GPU's
    monkeypatch.setattr(skinny_pdl, "why_not_swiglu", lambda m, w: "no GPU here")
    monkeypatch.setattr(skinny_pdl, "takes_rms", lambda *args, **kwargs: True)  # at this tiny K it has none
    assert kernels._swiglu_in_gemm(1) is ring
    assert kernels._attn_norm_in_gemm(1)
    assert kernels._mlp_norm_in_gemm(1) is not ring
