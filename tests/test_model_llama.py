"""`rooflint model` for the Llama family on a CPU, with tiny configs (2 layers, hidden 64, 4 query
heads sharing 2 KV heads, vocab 256).

The forward is checked against Hugging Face's own LlamaForCausalLM / Qwen2ForCausalLM /
MistralForCausalLM on the same weights; the built-in names against the published parameter
counts; bad input as one line and exit 2. Timing is never asserted.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from rooflint.core.errors import UserError
from rooflint.core.specs import measured_spec
from rooflint.models import architectures, catalog, checks, llama, memory, sweep
from rooflint.models.base import Dims, OpRecorder, Phase, build
from rooflint.models.model_run import run_model
from rooflint.models.outcome import ModelRequest
from rooflint.outputs.results import OK, SKIPPED, read_results

transformers = pytest.importorskip("transformers", reason="the model tests need transformers")
# One worker builds the module's eager, compiled and Triton runs, once (see tests/test_model_gpt2.py).
pytestmark = pytest.mark.xdist_group("model_llama")

TINY = {
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "rope_theta": 500000.0,
    # original_max 16 puts the tiny head_dim's frequencies on all three sides of llama3's blend
    "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 16},
    "tie_word_embeddings": True, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "hidden_act": "silu",
}  # fmt: skip
QWEN = {**TINY, "model_type": "qwen2", "rope_scaling": None, "rope_theta": 1e6, "tie_word_embeddings": False}
MISTRAL = {**TINY, "model_type": "mistral", "rope_scaling": None, "sliding_window": None, "tie_word_embeddings": False}
CPU_SPEC = measured_spec(
    "cpu", "CPU (test)", 10.0, {"tensor_fp32_tflops": 0.1, "tensor_bf16_tflops": 0.1, "cuda_fp32_tflops": 0.1}, "test"
)
# Published parameter counts (Hugging Face model cards), from the built-in shapes on the meta device.
PUBLISHED_PARAMETERS = {
    "llama-3.2-1b": 1.24e9, "llama-3.1-8b": 8.03e9, "qwen2.5-0.5b": 0.494e9, "qwen2.5-7b": 7.62e9,
    "mistral-7b": 7.25e9, "gpt2": 124e6, "gpt2-medium": 355e6,
}  # fmt: skip


def tiny_request(tmp_path, **fields) -> ModelRequest:
    base = dict(model="llama", model_spec=llama.Llama({"tiny": TINY}), config="tiny", batch=2, seq=16, prompt=8,
                new_tokens=33, dtype="fp32", kernels=["eager"], out=tmp_path, device="cpu", spec=CPU_SPEC, rep_ms=0,
                plots=False)  # fmt: skip
    base.update(fields)
    return ModelRequest(**base)


def write_config(tmp_path, fields, name="tiny-llama"):
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(json.dumps(fields))
    return path


# ---- configs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(catalog.BUILTINS))
def test_every_builtin_name_parses_to_its_published_size(name):
    spec, config = catalog.resolve(name, None)
    assert config == name
    hf_config = spec.hf_config(config)
    parameters = memory.parameter_bytes(spec, hf_config, 1)
    assert parameters == pytest.approx(PUBLISHED_PARAMETERS[name], rel=0.01)


def test_llama_builtin_shapes_and_rope_scaling():
    dims = llama.SPEC.dims(llama.SPEC.hf_config("llama-3.1-8b"))
    assert dims == Dims(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, vocab=128256,
                        max_positions=131072)  # fmt: skip
    rope = llama.SPEC.hf_config("llama-3.2-1b").rope_parameters
    assert rope["rope_type"] == "llama3" and rope["factor"] == 32.0 and rope["rope_theta"] == 500000.0
    assert llama.SPEC.hf_config("llama-3.2-1b").tie_word_embeddings
    assert not llama.SPEC.hf_config("llama-3.1-8b").tie_word_embeddings


def test_gpt2_with_a_config_option_keeps_working():
    spec, config = catalog.resolve("gpt2", "gpt2-medium")
    assert (spec.name, config) == ("gpt2", "gpt2-medium")
    assert catalog.resolve("gpt2-medium", None)[1] == "gpt2-medium"


def test_a_config_json_path_is_a_model(tmp_path):
    path = write_config(tmp_path, TINY)
    spec, config = catalog.resolve(str(path), None)
    assert config == "tiny-llama"
    assert spec.dims(spec.hf_config(config)).kv_heads == 2
    assert catalog.resolve(str(path.parent), None)[1] == "tiny-llama"  # the directory holding it too


def test_unsupported_features_are_refused_before_building():
    with pytest.raises(UserError, match="sliding_window=4096"):
        llama.Llama({"m": {**MISTRAL, "sliding_window": 4096}}).hf_config("m")
    with pytest.raises(UserError, match="rope_type='proportional'"):  # yarn and the others: test_llama_rope_scaling
        llama.Llama({"y": {**TINY, "rope_scaling": {"rope_type": "proportional", "factor": 4.0}}}).hf_config("y")


def test_unknown_architecture_is_one_line_and_exit_2(tmp_path):
    # In this process: `rooflint model`'s bad input through the installed script is
    # tests/test_bad_input.py's (model_unknown_config), the same error path.
    path = write_config(tmp_path, {**TINY, "model_type": "bert"}, "bert")
    code, lines = in_process(path, "--device", "cpu")
    assert code == 2, lines
    assert len(lines) == 1 and "Traceback" not in lines[0]
    assert "model_type='bert'" in lines[0] and "llama, qwen2, mistral" in lines[0]


def in_process(*args):
    """(exit code, stderr lines) of ``rooflint model ...`` run in this process (no interpreter start)."""
    from typer.testing import CliRunner

    from rooflint.cli.app import app

    done = CliRunner().invoke(app, ["model", *map(str, args)])
    return done.exit_code, done.stderr.strip().splitlines()


def test_unknown_name_and_bad_sweep_sizes_are_one_line_and_exit_2():
    code, lines = in_process("llama-9", "--device", "cpu")
    assert code == 2 and len(lines) == 1 and "llama-3.2-1b" in lines[0]
    code, lines = in_process("llama-3.2-1b", "--batch", "1,x", "--device", "cpu")
    assert code == 2 and len(lines) == 1 and "--batch takes positive integers" in lines[0]
    code, lines = in_process("llama-3.2-1b", "--dtype", "int8", "--device", "cpu")
    assert code == 2 and len(lines) == 1 and "'int8'" in lines[0] and "fp32, fp16, bf16" in lines[0]


def test_a_point_that_cannot_fit_is_refused_in_one_line_before_building():
    # 128 x 32768 tokens of Llama-3.1-8B: the logits alone are ~1 TB; refused from the config alone
    code, lines = in_process("llama-3.1-8b", "--batch", "128", "--seq", "32768", "--device", "cpu")
    assert code == 2, lines
    (line,) = lines
    assert "needs" in line and "GB" in line and "lower --batch or --seq" in line


# ---- the forward -----------------------------------------------------------------------------
def test_rope_frequencies_match_hugging_face():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    for fields in (TINY, {**TINY, "rope_scaling": {"rope_type": "linear", "factor": 4.0}}, QWEN):
        config = llama.Llama({"c": fields}).hf_config("c")
        rope = dict(config.rope_parameters)
        ours, _ = llama.inverse_frequencies(rope, 16)
        init = ROPE_INIT_FUNCTIONS.get(rope["rope_type"])
        theirs = init(config, "cpu")[0] if init else 1.0 / 1e6 ** (torch.arange(0, 16, 2).float() / 16)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    # llama3 divides the low frequencies by the factor and blends the middle ones (wavelength
    # 2 pi, between 16 / 4 and 16, for the first frequency here)
    plain, _ = llama.inverse_frequencies({"rope_theta": 500000.0}, 16)
    scaled, _ = llama.inverse_frequencies(dict(llama.Llama({"t": TINY}).hf_config("t").rope_parameters), 16)
    assert plain[0] / 32 < scaled[0] < plain[0] and scaled[-1] == pytest.approx(plain[-1] / 32)


@pytest.mark.parametrize("fields", [TINY, QWEN, MISTRAL], ids=["llama", "qwen2", "mistral"])
def test_forward_matches_hugging_face_in_float64(fields):
    spec = llama.Llama({"tiny": fields})
    loaded = build(spec, "tiny", torch.float64, torch.device("cpu"))
    kernels = spec.kernel_set("eager", torch.float64, torch.device("cpu"), 16, spec.norm_eps(loaded.hf.config))
    ids = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(1))
    ours = spec.forward(loaded.weights, kernels, ids, 0, None, OpRecorder())
    # HF's eager attention takes its softmax in fp32 and its RMSNorm too: ~1e-8, not 1e-15
    assert checks.relative_error(ours, checks.hf_logits(loaded.hf, ids)) < 1e-6
    if fields["model_type"] == "qwen2":
        assert loaded.weights.layers[0].qkv_b is not None  # Qwen2's q, k, v biases are in the GEMM
    tied = loaded.weights.head.data_ptr() == loaded.weights.embed.data_ptr()
    assert tied == fields["tie_word_embeddings"]


def test_bf16_reference_keeps_its_rope_in_fp32_at_long_positions():
    # Llama-3.2-1B's RoPE (head_dim 64, theta 500000, llama3 factor 32) on a narrow model; the larger
    # init sharpens attention so that a wrong angle changes the logits. Hugging Face keeps inv_freq
    # in fp32 in a bf16 model: rounded to bf16, the angle at position 500 is off by up to a radian
    # and the reference itself was 0.13 away from every kernel set (GPU runs: 0.2 over 16 layers).
    fields = {**architectures.PRESETS["llama-3.2-1b"], "hidden_size": 128, "num_attention_heads": 2,
              "num_key_value_heads": 1, "intermediate_size": 256, "vocab_size": 256, "initializer_range": 0.2,
              "max_position_embeddings": 16384}  # fmt: skip
    spec = llama.Llama({"narrow": fields})
    loaded = build(spec, "narrow", torch.bfloat16, torch.device("cpu"), layers=1)
    rotary = loaded.hf.model.rotary_emb
    assert rotary.inv_freq.dtype == torch.float32
    positions = torch.arange(512)[None]
    cos, sin = rotary(torch.zeros((), dtype=torch.bfloat16), positions)
    assert torch.equal(cos[0], loaded.weights.cos[:512]) and torch.equal(sin[0], loaded.weights.sin[:512])
    kernels = spec.kernel_set("eager", torch.bfloat16, torch.device("cpu"), 64, spec.norm_eps(loaded.hf.config))
    ids = torch.randint(0, 256, (1, 512), generator=torch.Generator().manual_seed(1))
    ours = spec.forward(loaded.weights, kernels, ids, 0, None, OpRecorder())
    assert checks.relative_error(ours, checks.hf_logits(loaded.hf, ids)) < checks.MODEL_TOLERANCES["bf16"]


def test_hugging_face_modules_read_the_concatenated_weights():
    spec = llama.Llama({"tiny": TINY})
    loaded = build(spec, "tiny", torch.float32, torch.device("cpu"))
    attn = loaded.hf.model.layers[1].self_attn
    qkv = loaded.weights.layers[1].qkv_w
    assert attn.k_proj.weight.data_ptr() == qkv[64:96].data_ptr()  # a view: the model is held once


@pytest.mark.parametrize("append", [False, True], ids=["prefill", "with-cache"])
def test_rope_kernel_rotates_in_place_and_appends_as_the_eager_ops_do(append):
    from rooflint.models.cache import KVCache
    from rooflint.models.llama_kernels import LlamaEager
    from rooflint.models.ops.rope_append import rope_append

    batch, tokens, heads, kv_heads, d, start = 2, 3, 4, 2, 16, 5
    cos, sin = llama.rope_tables(dict(llama.Llama({"t": TINY}).hf_config("t").rope_parameters), d, 64,
                                 torch.float32, "cpu")  # fmt: skip
    weights = llama.LlamaWeights(None, [], None, None, cos, sin, heads, kv_heads, d, 0)
    qkv = torch.randn(batch * tokens, (heads + 2 * kv_heads) * d, generator=torch.Generator().manual_seed(3))
    caches = [KVCache(1, batch, kv_heads, d, 32, torch.float32, "cpu") if append else None for _ in range(2)]
    eager = LlamaEager(torch.float32, torch.device("cpu"), d, 1e-5)
    q, k, v = eager.rope_append(qkv.clone(), batch, tokens, weights, start, caches[0], 0)
    fused = qkv.clone()
    rows = (caches[1].slots(start, tokens), *caches[1].rows(0)) if append else None
    rope_append(fused, cos, sin, tokens, start, heads, kv_heads, d, rows)
    q_width, kv_width = heads * d, kv_heads * d
    torch.testing.assert_close(fused[:, :q_width].view_as(q), q)
    torch.testing.assert_close(fused[:, q_width : q_width + kv_width].view_as(k), k)
    torch.testing.assert_close(fused[:, q_width + kv_width :], qkv[:, q_width + kv_width :])  # v untouched
    assert not torch.equal(fused[:, :q_width], qkv[:, :q_width])  # rotated, not copied
    if append:
        for ours, theirs in zip((caches[1].k[0], caches[1].v[0]), (caches[0].k[0], caches[0].v[0])):
            assert theirs.abs().sum() > 0
            torch.testing.assert_close(ours, theirs)


def test_triton_attention_reads_grouped_kv_heads_in_place():
    from rooflint.kernels.attention.triton import triton_attention

    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 4, 16, 16, generator=g)
    k, v = torch.randn(1, 2, 16, 16, generator=g), torch.randn(1, 2, 16, 16, generator=g)
    ours = triton_attention(q, k, v, True, group=2)
    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def eager_run(tmp_path_factory):
    # A config.json path, as `rooflint model path/config.json` takes it, with a sweep
    folder = tmp_path_factory.mktemp("llama-eager")
    path = write_config(folder, TINY, name="tiny-llama-0.1b")  # a dotted name, as llama-3.2-1b
    spec, config = catalog.resolve(str(path), None)
    return run_model(tiny_request(folder / "out", model=str(path), model_spec=spec, config=config, new_tokens=6,
                                  sweep_batches=[1, 2], sweep_contexts=[8, 40], plots=True))  # fmt: skip


@pytest.fixture(scope="module")
def compile_run(tmp_path_factory):
    # inductor compiles C++ on a CPU: one layer, a few tokens
    out = tmp_path_factory.mktemp("llama-compile")
    return run_model(tiny_request(out, kernels=["compile"], batch=1, seq=4, prompt=4, new_tokens=3, layers=1))


def test_grouped_decode_attention_compiles_without_a_graph_break():
    # The runner compiles the decode step with dynamic=True, where the head counts are symbolic: a
    # graph break in this slot (SDPA's enable_gqa given a SymBool) compiled each layer's attention
    # as a frame of its own, recompiled per layer index until dynamo's limit of 8 sent the rest to
    # eager. fullgraph raises on a graph break; the eager backend traces without inductor's build.
    from rooflint.models.cache import KVCache
    from rooflint.models.llama_kernels import LlamaCompile

    batch, heads, kv_heads, d, length = 2, 4, 2, 16, 5
    g = torch.Generator().manual_seed(5)
    cache = KVCache(1, batch, kv_heads, d, 16, torch.float32, "cpu")
    cache.k[0].copy_(torch.randn(cache.k[0].shape, generator=g))
    cache.v[0].copy_(torch.randn(cache.v[0].shape, generator=g))
    q = torch.randn(batch, heads, 1, d, generator=g)
    kernels = LlamaCompile(torch.float32, torch.device("cpu"), d, 1e-5)
    step = torch.compile(kernels.attend_decode_gqa, dynamic=True, fullgraph=True, backend="eager")
    k, v = cache.view(0, length)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # head i on kv head i // 2
    torch.testing.assert_close(step(q, cache, 0, length), expected)


@pytest.fixture(scope="module")
def triton_run(tmp_path_factory):
    # Triton's CPU interpreter (conftest sets TRITON_INTERPRET=1): one sequence, few tokens
    out = tmp_path_factory.mktemp("llama-triton")
    return run_model(tiny_request(out, kernels=["triton"], batch=1, seq=8, prompt=4, new_tokens=3))


def test_triton_set_swaps_in_rooflints_families(triton_run):
    (result,) = triton_run.sets
    assert result.status == OK, result.message
    plan = dict(item.split("=", 1) for item in result.plan.split("; "))
    for slot in ("rms_norm", "swiglu", "decode_attention"):
        assert plan[slot] == "triton", result.plan
    for slot in ("prefill_attention", "rope", "kv_append", "linear"):
        assert plan[slot].startswith("triton"), result.plan
    assert "gate/up" in plan["linear"], result.plan  # every decode projection streams its weights


@pytest.mark.parametrize("run", ["eager_run", "compile_run", "triton_run"])
def test_kernel_set_logits_and_greedy_tokens_match_hf(run, request):
    (result,) = request.getfixturevalue(run).sets
    assert result.status == OK, result.message
    assert result.check.rel_error < 1e-5
    assert result.check.token_matches == result.check.tokens_compared > 0


def test_every_llama_op_is_attributed(eager_run):
    (result,) = eager_run.sets
    prefill_ops = set(llama.OPS) - {"sample"}
    assert set(result.phases["prefill"].attribution.ops) == prefill_ops
    assert set(result.phases["decode"].attribution.ops) == set(llama.OPS)
    assert set(result.phases["decode"].costs) == set(llama.OPS)
    for phase in ("prefill", "decode"):  # every aten op of the step inside an op range, by name
        unattributed = result.phases[phase].attribution.unattributed_kernels
        assert not unattributed, (phase, dict(unattributed))


# ---- costs -----------------------------------------------------------------------------------
def test_one_layer_flops_by_hand():
    d, heads, kv, hd, ffn, rows, vocab = 64, 4, 2, 16, 128, 10, 256
    dims = Dims(layers=1, hidden=d, heads=heads, kv_heads=kv, head_dim=hd, ffn=ffn, vocab=vocab, max_positions=64)
    costs = llama.llama_costs(dims, Phase("prefill", 1, rows, rows), "bf16")
    q, k = heads * hd, kv * hd
    assert costs["qkv_proj"].tensor_flops == 2 * rows * d * (q + 2 * k)
    assert costs["o_proj"].tensor_flops == 2 * rows * q * d
    assert costs["gate_up_proj"].tensor_flops == 2 * rows * d * 2 * ffn
    assert costs["down_proj"].tensor_flops == 2 * rows * ffn * d
    # causal: half the N^2 (query, key) pairs (the attention family's FlashAttention convention),
    # 4 D FLOPs a pair (QK^T and PV)
    assert costs["attention"].tensor_flops == 4 * heads * hd * rows * rows / 2
    assert costs["lm_head"].tensor_flops == 2 * rows * d * vocab
    # GQA: K and V are read once per kv head, not per query head
    assert costs["attention"].bytes == 2 * (2 * rows * q + 2 * rows * k)
    # one plain norm, then the residual-fused ones: 2L - 1 in the layers and the final one
    assert costs["rms_norm"].bytes == 2 * (2 * rows * d + d)
    assert costs["add_rms_norm"].bytes == 2 * 2 * (4 * rows * d + d)


def test_decode_floor_turns_compute_bound_as_the_batch_grows():
    from rooflint.core.specs import get_spec
    from rooflint.models.rows import phase_floor, total_cost

    h100 = get_spec("h100_sxm")
    dims = llama.SPEC.dims(llama.SPEC.hf_config("llama-3.2-1b"))

    def bound(batch, context):
        costs = llama.llama_costs(dims, Phase("decode", batch, 1, context), "bf16")
        return phase_floor(total_cost(costs), h100, "bf16")[1]

    # a short context: the weights are read once for the batch, so FLOPs per byte grow with B;
    # a long one: each sequence reads its own KV cache, and memory binds at any batch
    assert [bound(1, 16), bound(1024, 16), bound(1024, 4096)] == ["memory", "compute", "memory"]


# ---- the sweep -------------------------------------------------------------------------------
def test_sweep_rows_carry_the_numeric_columns(eager_run):
    points = {(p.batch, p.context): p for p in eager_run.sweep}
    assert set(points) == {(1, 8), (1, 40), (2, 8), (2, 40)}
    for point in points.values():
        assert point.status == OK, point.message
        assert point.tokens_per_s > 0 and point.floor_ms > 0 and point.bound in ("memory", "compute")
    frame = read_results(eager_run.request.out / "results.csv")
    rows = frame[frame["shape"].str.contains("sweep=1")]
    assert set(zip(rows["batch"], rows["context"])) == set(points)
    assert (rows["phase"] == "decode").all() and rows["pct_of_floor"].map(math.isfinite).all()


def test_sweep_skips_a_point_that_cannot_fit_and_refuses_when_none_can():
    dims = Dims(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=256, max_positions=4096)
    cpu = torch.device("cpu")
    small = sweep.point_need(dims, 10_000, 1, 64, "fp32").total
    points, refused = sweep.plan(dims, 10_000, [1, 64], [64], "fp32", int(small * 1.2), cpu, "tiny")
    assert points == [(1, 64)] and list(refused) == [(64, 64)]
    assert "needs" in refused[(64, 64)] and "lower --batch or --context" in refused[(64, 64)]
    with pytest.raises(UserError, match="needs"):
        sweep.plan(dims, 10_000, [64], [64], "fp32", int(small * 1.2), cpu, "tiny")
    _, refused = sweep.plan(dims, 10_000, [1], [64, 4090], "fp32", 10**12, cpu, "tiny")
    assert "past tiny's 4096 positions" in refused[(1, 4090)]


def test_skipped_peers_say_why(eager_run):
    from rooflint.models.peers import skipped_peer_rows

    rows = skipped_peer_rows("model:tiny", eager_run.request, torch.device("cpu"))
    # On a CPU the compiled prefill peer is a skipped row with its reason too, not a missing one.
    assert {r.variant for r in rows} == {"hf_static_compile", "hf_compile", "vllm", "sglang"}
    assert all(r.status == SKIPPED and r.message for r in rows)
    (compiled,) = [r for r in rows if r.variant == "hf_compile"]
    assert compiled.phase == "prefill" and compiled.shape.startswith("op=step,phase=prefill,")


# ---- the console script ----------------------------------------------------------------------
def test_a_config_json_run_writes_its_sweep_rows_and_table(eager_run):
    out = eager_run.request.out
    frame = read_results(out / "results.csv")
    assert set(frame["family"]) == {"model:tiny-llama-0.1b"}
    swept = frame[frame["shape"].str.contains("sweep=1")]
    assert set(zip(swept["batch"], swept["context"])) == {(1, 8), (1, 40), (2, 8), (2, 40)}
    assert (swept["status"] == OK).all() and (swept["tokens_per_s"] > 0).all()
    assert "decode sweep" in (out / "model-tiny-llama-0.1b.md").read_text()


def test_a_dotted_model_name_keeps_a_roofline_per_set_and_phase(eager_run):
    # with_suffix took ".1b-eager-decode" for a suffix: every plot of llama-3.2-1b went to one file
    images = sorted(path.name for path in eager_run.files if path.suffix == ".png")
    assert images == ["roofline-tiny-llama-0.1b-eager-decode.png", "roofline-tiny-llama-0.1b-eager-prefill.png",
                      "sweep-tiny-llama-0.1b.png"]  # fmt: skip
    assert all(path.exists() for path in eager_run.files)


def test_llama_help_names_the_builtins():
    from typer.testing import CliRunner

    from rooflint.cli.app import app

    done = CliRunner().invoke(app, ["model", "--help"])
    assert done.exit_code == 0
    assert "llama-3.2-1b" in done.stdout and "--context" in done.stdout


def test_architectures_list_what_the_forward_runs():
    assert set(architectures.ARCHITECTURES) == {"llama", "qwen2", "mistral"}
    for name, fields in architectures.PRESETS.items():
        assert catalog.BUILTINS[name] == ("rooflint.models.llama", name)
        architectures.check_architecture(fields["model_type"], name)
