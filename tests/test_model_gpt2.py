"""`rooflint model gpt2` on a CPU with a tiny GPT-2 (2 layers, width 64, 2 heads, vocab 250).

Eager kernels and rooflint's Triton kernels (through Triton's CPU interpreter: conftest sets
TRITON_INTERPRET=1) are checked against Hugging Face's eager model; every op's time must be
attributed; the rows must go through the results, report and compare paths. Timing itself is
never asserted: runs take one sample (rep_ms=0).
"""

from __future__ import annotations

import math
import os
import socket
import sys

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from rooflint.analysis.compare import compare_frames
from rooflint.cli.app import app
from rooflint.core.errors import UserError
from rooflint.core.specs import measured_spec
from rooflint.engine.timing import summarize
from rooflint.kernels import attention, decode_attention, gelu_linear, layernorm
from rooflint.models import attribution as attribution_module
from rooflint.models import checks, gpt2, memory
from rooflint.models.attribution import Attribution, OpTime, _Event, attribute_cpu, attribute_device
from rooflint.models.base import RANGE_PREFIX, STEP_RANGE, Phase, build
from rooflint.models.kernel_set_run import fp32_reference
from rooflint.models.kernel_sets import EagerKernels, make_kernel_set
from rooflint.models.model_run import run_model
from rooflint.models.outcome import ModelRequest, PhaseResult, SetResult
from rooflint.models.rows import step_message
from rooflint.models.runner import Runner
from rooflint.outputs.report import build_report
from rooflint.outputs.results import FAILED, OK, read_results

pytest.importorskip("transformers", reason="the model tests need transformers (pip install 'rooflint[models]')")
# One worker builds the module's runs: under --dist loadgroup, tests of one module may otherwise go to
# both workers, and each would build the same eager and Triton runs (seconds in the interpreter).
pytestmark = pytest.mark.xdist_group("model_gpt2")


class TinyGPT2(gpt2.GPT2):
    vocab = 250  # not a multiple of 128: the triton set's padded lm_head slices its logits
    max_positions = 64
    configs = {"tiny": {"n_layer": 2, "n_embd": 64, "n_head": 2}}


TINY = TinyGPT2()
LAYERS = 2
# A fixed roof: measuring this CPU's ceilings takes seconds and says nothing about correctness.
CPU_SPEC = measured_spec(
    "cpu", "CPU (test)", 10.0, {"tensor_fp32_tflops": 0.1, "tensor_bf16_tflops": 0.1, "cuda_fp32_tflops": 0.1}, "test"
)
UNFUSED = {"embedding", "layer_norm", "qkv_proj", "attention", "out_proj", "residual", "mlp_up_gelu", "mlp_down",
           "lm_head"}  # fmt: skip
PREFILL_OPS = UNFUSED  # the prefill phase has no greedy pick
# The triton set's decode step: norms in the GEMM prologues, residual adds in their epilogues and
# the new K and V written into the cache by the QKV GEMM. Only ln_f runs as a layer norm of its own.
FUSED_DECODE = {"embedding", "layer_norm+qkv_proj+kv_append", "attention", "out_proj+residual",
                "layer_norm+mlp_up_gelu", "mlp_down+residual", "layer_norm", "lm_head", "sample"}  # fmt: skip


def request(tmp_path, **fields) -> ModelRequest:
    base = dict(model_spec=TINY, config="tiny", batch=2, seq=16, prompt=8, new_tokens=4, dtype="fp32",
                kernels=["eager"], out=tmp_path, device="cpu", spec=CPU_SPEC, rep_ms=0, plots=False)  # fmt: skip
    base.update(fields)
    return ModelRequest(**base)


@pytest.fixture(scope="module")
def eager_run(tmp_path_factory):
    # 33 new tokens: the first 32 are compared with HF's greedy ones.
    out = tmp_path_factory.mktemp("eager")
    return run_model(request(out, new_tokens=33, plots=True))


@pytest.fixture(scope="module")
def triton_run(tmp_path_factory):
    # The interpreter runs each Triton program in numpy (~10 ms each): two sequences, few tokens.
    # Prefill has 24 rows a sequence, above the 16 where the set fuses (each Triton kernel on its own
    # there); the 4-token prompt and the decode steps (2 rows) take the fused paths. The persistent
    # decode-layers kernel is off (its default): tests/test_decode_layers.py runs it on this request.
    out = tmp_path_factory.mktemp("triton")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("ROOFLINT_PERSISTENT", raising=False)
        return run_model(request(out, kernels=["triton"], batch=2, seq=24, prompt=4, new_tokens=3))


def only_set(outcome):
    (result,) = outcome.sets
    return result


def test_eager_logits_and_32_greedy_tokens_match_hf(eager_run):
    result = only_set(eager_run)
    assert result.status == OK, result.message
    assert result.check.rel_error < 1e-5
    assert result.check.tokens_compared == 2 * 32
    assert result.check.token_matches == result.check.tokens_compared


def test_triton_swaps_every_slot_and_matches_hf_in_fp32(triton_run):
    result = only_set(triton_run)
    assert result.status == OK, result.message
    swapped = dict(item.split("=", 1) for item in result.plan.split("; "))
    for slot in ("layer_norm", "prefill_attention", "kv_append", "decode_attention", "linear_gelu"):
        assert swapped[slot] == "triton", result.plan
    assert swapped["linear"].startswith("triton for decode"), result.plan  # the decode GEMMs stream weights
    assert swapped["fusions"] == "<= 16 rows: norm_linear, linear_residual, kv_append", result.plan
    assert swapped["decoder_layers"].startswith("off:"), result.plan
    assert result.check.rel_error < 1e-4
    assert result.check.token_matches == result.check.tokens_compared == 2 * 3


@pytest.mark.parametrize("run", ["eager_run", "triton_run"])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_every_op_is_attributed_with_its_call_count(run, phase, request):
    result = only_set(request.getfixturevalue(run))
    attribution = result.phases[phase].attribution
    fused = run == "triton_run" and phase == "decode"
    expected = FUSED_DECODE if fused else PREFILL_OPS | ({"sample"} if phase == "decode" else set())
    assert set(attribution.ops) == expected
    # the costs name the same ops, so every timed op gets a roofline point
    assert set(result.phases[phase].costs) == expected
    calls = {name: op.calls for name, op in attribution.ops.items()}
    if fused:  # one of each fused op per layer; ln_f alone
        assert calls["layer_norm"] == 1
        for op in FUSED_DECODE - {"embedding", "layer_norm", "lm_head", "sample"}:
            assert calls[op] == LAYERS, op
    else:
        # ln_1 and ln_2 per layer plus ln_f; two residual adds per layer; one of each projection per layer.
        assert calls["layer_norm"] == 2 * LAYERS + 1
        assert calls["residual"] == 2 * LAYERS
        for op in ("qkv_proj", "attention", "out_proj", "mlp_up_gelu", "mlp_down"):
            assert calls[op] == LAYERS, op
    assert calls["embedding"] == calls["lm_head"] == 1
    assert all(op.ms > 0 for op in attribution.ops.values())
    # Every aten op of the step ran inside an op range (Python between ranges is idle, not work).
    # Checked by name: the unattributed share of the step's time depends on the machine's load, as
    # a microsecond view that the scheduler interrupts takes a share of a CPU step many times its own.
    assert not attribution.unattributed_kernels, dict(attribution.unattributed_kernels)


@pytest.mark.parametrize("run", ["eager_run", "triton_run"])
def test_op_times_fit_in_the_profiled_step_without_double_counting(run, request):
    result = only_set(request.getfixturevalue(run))
    for phase in ("prefill", "decode"):
        attribution = result.phases[phase].attribution
        assert attribution.mode == "cpu ranges"
        assert 0 < attribution.total_ms <= attribution.span_ms and attribution.idle_ms >= 0
    # Triton's interpreter makes each op slow, so the step is nearly all op time.
    if run == "triton_run":
        assert attribution.total_ms >= 0.8 * attribution.span_ms


def test_gpu_kernels_are_attributed_to_the_op_range_that_launched_them():
    # A Kineto trace in miniature (times in ns): the step range with two op ranges; kernels on the
    # device run later than their launches, which is why they are matched through their launch.
    def cpu(name, start, end, correlation, activity="cpu_op"):
        return _Event(name, True, start, end, correlation, 0, activity == "user_annotation", activity)

    def gpu(name, start, end, correlation, linked, activity="kernel"):
        return _Event(name, False, start, end, correlation, linked, "annotation" in activity, activity)

    events = [
        cpu(STEP_RANGE, 0, 1000, 1, "user_annotation"),
        cpu(RANGE_PREFIX + "layer_norm", 10, 100, 2),
        cpu("aten::layer_norm", 20, 90, 3),
        cpu(RANGE_PREFIX + "attention", 200, 400, 4),
        cpu("cuLaunchKernelEx", 250, 260, 900, "cuda_driver"),  # a Triton launch: no aten op
        cpu("aten::add", 500, 520, 5),  # outside every op range
        cpu("aten::copy_", 2000, 2100, 6),  # after the step
        gpu("ln_kernel", 3000, 3400, 800, 3),  # linked to aten::layer_norm
        gpu("flash_kernel", 3500, 4500, 900, 0),  # no link: found through the driver call
        gpu("flash_kernel", 4600, 4700, 901, 4),  # linked to the attention range itself
        gpu("add_kernel", 4800, 4900, 902, 5),
        gpu("copy_kernel", 5000, 5500, 903, 6),  # launched after the step: not the step's
        gpu(STEP_RANGE, 3000, 4900, 1, "gpu_user_annotation"),
        gpu("cudaStreamSynchronize", 4900, 5000, 904, 0, "cuda_sync"),
    ]
    result = attribute_device(events)
    assert result.ops["layer_norm"].ms == pytest.approx(400e-6)
    assert result.ops["attention"].ms == pytest.approx(1100e-6)
    assert result.ops["attention"].kernels == {"flash_kernel": pytest.approx(1100e-6)}
    assert result.ops["layer_norm"].calls == result.ops["attention"].calls == 1
    assert result.unattributed_ms == pytest.approx(100e-6)
    assert result.unattributed_kernels == {"add_kernel": pytest.approx(100e-6)}
    assert result.span_ms == pytest.approx(1900e-6)  # first kernel start to last kernel end
    assert result.idle_ms == pytest.approx(300e-6)  # the gaps between the step's kernels


def test_cpu_aten_ops_outside_every_op_range_are_named_whatever_their_time():
    # A CPU trace in miniature (times in ns): torch's C++ op ranges are cpu ops, like the aten ops.
    def cpu(name, start, end, activity="cpu_op"):
        return _Event(name, True, start, end, 0, 0, activity == "user_annotation", activity)

    events = [
        cpu(STEP_RANGE, 0, 1000, "user_annotation"),
        cpu(RANGE_PREFIX + "layer_norm", 10, 100),
        cpu("aten::layer_norm", 20, 90),
        cpu("aten::native_layer_norm", 30, 80),  # inside aten::layer_norm: counted there
        cpu("aten::select", 300, 302),  # outside every op range
        cpu("aten::as_strided", 300, 301),  # inside aten::select
        cpu("aten::view", 500, 500),  # outside every op range, and too short to time: still named
        cpu(RANGE_PREFIX + "lm_head", 600, 900),
        cpu("aten::linear", 610, 890),
        cpu("aten::copy_", 2000, 2100),  # after the step
    ]
    result = attribute_cpu(events)
    assert result.ops["layer_norm"].kernels == {"aten::layer_norm": pytest.approx(70e-6)}
    assert result.ops["lm_head"].kernels == {"aten::linear": pytest.approx(280e-6)}
    assert dict(result.unattributed_kernels) == {"aten::select": pytest.approx(2e-6), "aten::view": 0}
    assert result.unattributed_ms == pytest.approx(2e-6)
    assert result.total_ms == pytest.approx(392e-6) and result.span_ms == pytest.approx(1000e-6)


def test_overlapping_kernels_count_what_each_adds_to_the_step():
    # Under programmatic dependent launch a kernel starts while the one before it runs (it loads
    # its weights, then waits): each op gets its end less the previous kernel's end, so the ops
    # sum to the busy span, not to the sum of the overlapping durations.
    def cpu(name, start, end, correlation, activity="cpu_op"):
        return _Event(name, True, start, end, correlation, 0, activity == "user_annotation", activity)

    def gpu(name, start, end, linked):
        return _Event(name, False, start, end, 0, linked, False, "kernel")

    events = [
        cpu(STEP_RANGE, 0, 1000, 1, "user_annotation"),
        cpu(RANGE_PREFIX + "qkv_proj", 10, 100, 2),
        cpu(RANGE_PREFIX + "attention", 200, 300, 3),
        cpu(RANGE_PREFIX + "out_proj", 400, 500, 4),
        gpu("gemm", 2000, 2500, 2),
        gpu("attend", 2300, 3000, 3),  # started 200 ns before the GEMM ended
        gpu("gemm", 2400, 3100, 4),  # started before both ended: adds 100 ns
        gpu("gemm", 3300, 3400, 4),  # after a 200 ns gap, no overlap: its duration
    ]
    result = attribute_device(events)
    assert result.ops["qkv_proj"].ms == pytest.approx(500e-6)
    assert result.ops["attention"].ms == pytest.approx(500e-6)
    assert result.ops["out_proj"].ms == pytest.approx(200e-6)
    assert result.span_ms == pytest.approx(1400e-6)
    assert result.total_ms == pytest.approx(1200e-6) and result.idle_ms == pytest.approx(200e-6)


def test_a_graph_replay_takes_the_ops_of_the_op_by_op_step_kernel_by_kernel():
    # The timed step is a CUDA graph: its kernels carry no op ranges, but come in the op-by-op
    # step's order. Matched by position, the replay's (overlapping) times go to the ops.
    def cpu(name, start, end, correlation, activity="cpu_op"):
        return _Event(name, True, start, end, correlation, 0, activity == "user_annotation", activity)

    def gpu(name, start, end, linked=0):
        return _Event(name, False, start, end, 0, linked, False, "kernel")

    op_by_op = [
        cpu(STEP_RANGE, 0, 1000, 1, "user_annotation"),
        cpu(RANGE_PREFIX + "qkv_proj", 10, 100, 2),
        cpu(RANGE_PREFIX + "attention", 200, 300, 3),
        gpu("gemm", 2000, 2600, 2),
        gpu("attend", 3000, 3900, 3),
        gpu("combine", 4000, 4100, 3),
    ]
    replay = [gpu("gemm", 10_000, 10_500), gpu("attend", 10_300, 11_000), gpu("combine", 10_900, 11_100)]
    result = attribution_module.attribute_replay(op_by_op, replay)
    assert result.mode == "graph replay kernels"
    assert result.ops["qkv_proj"].ms == pytest.approx(500e-6)
    assert result.ops["attention"].ms == pytest.approx(600e-6)  # 500 of attend after the GEMM, 100 of combine
    assert result.ops["attention"].calls == 1 and result.span_ms == pytest.approx(1100e-6)
    # Another kernel sequence (a set that launches differently in a graph): not matched.
    assert attribution_module.attribute_replay(op_by_op, replay[:2]) is None
    assert attribution_module.attribute_replay(op_by_op, [replay[0], gpu("other", 10_300, 11_000), replay[2]]) is None


def test_the_cuda_set_has_no_persistent_kernel_phases():
    from rooflint.models.kernel_sets import CudaKernels

    # Built without TritonKernels.__init__: its persistent-kernel state does not exist there.
    assert CudaKernels.phase_shares(object.__new__(CudaKernels)) is None


@pytest.mark.parametrize(
    "ops_ms, verdict", [(95.0, "+5.0% (within 10%"), (105.0, "-5.0% (within 10%"), (80.0, "+20.0% (NOT within 10%")]
)
def test_the_sum_of_ops_check_reports_the_gap_to_the_timed_step(ops_ms, verdict):
    attribution = Attribution({"lm_head": OpTime(ms=ops_ms - 1.0, calls=1)}, 1.0, ops_ms + 2.0, "device kernels")
    phase = PhaseResult(Phase("prefill", 1, 8, 8), summarize([100.0], "cuda_events", True), 8, {}, attribution)
    assert math.isclose(phase.gap, 1 - ops_ms / 100.0)
    message = step_message(phase, SetResult("eager", OK, "", plan="layer_norm=eager"))
    assert f"ops sum {ops_ms:.4g} ms vs step 100 ms, gap {verdict}" in message
    assert "2 ms idle" in message
    on_cpu = Attribution(attribution.ops, 1.0, ops_ms + 2.0, "cpu ranges")  # the op table says the same
    cpu_phase = PhaseResult(phase.phase, phase.timing, 8, {}, on_cpu)
    assert "(not checked on a CPU;" in step_message(cpu_phase, SetResult("eager", OK, "", plan="layer_norm=eager"))


def test_rows_go_through_results_report_and_compare(eager_run, tmp_path):
    frame = read_results(eager_run.request.out / "results.csv")
    assert set(frame["family"]) == {"model:tiny"}
    assert not frame.duplicated(["family", "variant", "dtype", "shape", "gpu"]).any()  # compare's join key
    # Stamped as bench's rows are: the host too, which a fleet's table and merge need.
    assert (frame["host"] == socket.gethostname()).all() and (frame["gpu"] == "cpu").all()
    steps = frame[frame["shape"].str.startswith("op=step")].set_index("shape")
    assert set(steps.index) == {
        "op=step,phase=prefill,B=2,T=16",
        "op=step,phase=decode,B=2,prompt=8,new=33",
        "op=step,phase=generate,B=2,prompt=8,new=33",
    }
    for shape, row in steps.iterrows():
        assert row["status"] == OK and row["median_ms"] > 0
        phase = shape.split("phase=")[1].split(",")[0]
        assert row["phase"] == phase and row["batch"] == 2
        assert row["context"] == {"prefill": 16, "decode": 8 + 33 // 2, "generate": 8 + 33}[phase]
        per_step = {"prefill": 2 * 16, "decode": 2, "generate": 2 * 33}[phase]
        assert math.isclose(row["tokens_per_s"], per_step / (row["median_ms"] / 1e3), rel_tol=1e-9)
        assert "tok/s" not in row["message"]  # the numbers are columns now, not text
        if phase == "generate":  # the whole loop has no cost model, so no floor
            assert math.isnan(row["floor_ms"]) and math.isnan(row["pct_of_floor"])
        else:
            assert row["floor_ms"] > 0 and row["pct_of_floor"] == row["pct_of_roof"]
            assert math.isclose(row["pct_of_floor"], 100 * row["floor_ms"] / row["median_ms"], rel_tol=1e-9)
    ops = frame[~frame["shape"].str.startswith("op=step")]
    assert (ops["phase"] != "").all() and ops["tokens_per_s"].isna().all() and ops["floor_ms"].isna().all()
    ops = frame[frame["shape"].str.contains("phase=prefill") & ~frame["shape"].str.startswith("op=step")]
    assert PREFILL_OPS <= {shape.split(",")[0].removeprefix("op=") for shape in ops["shape"]}
    # fp32 matmuls are judged on the CUDA cores (no TF32), so their FLOPs sit in cuda_flops.
    assert (ops.loc[ops["shape"].str.startswith("op=attention"), "cuda_flops"] > 0).all()
    comparison = compare_frames(frame, frame, 0.05)
    assert not comparison.regressions
    report = build_report(frame)
    assert report["summary"]["rows"] == len(frame)
    images = sorted(path.name for path in eager_run.files if path.suffix == ".png")
    assert images == ["roofline-tiny-eager-decode.png", "roofline-tiny-eager-prefill.png"]
    assert "| lm_head |" in (eager_run.request.out / "model-tiny.md").read_text()


def test_op_costs_reuse_the_family_cost_models():
    dims = TINY.dims(TINY.hf_config("tiny"))
    phase = Phase("prefill", 2, 16, 16)
    costs = TINY.op_costs(dims, phase, "bf16")
    assert (
        costs["attention"].tensor_flops
        == LAYERS * attention.cost({"B": 2, "H": 2, "N": 16, "D": 32, "causal": True}, "bf16").tensor_flops
    )
    assert costs["mlp_up_gelu"].bytes == LAYERS * gelu_linear.cost({"m": 32, "k": 64, "n": 256}, "bf16").bytes
    assert costs["layer_norm"].bytes == (2 * LAYERS + 1) * layernorm.cost({"rows": 32, "hidden": 64}, "bf16").bytes
    # The GEMMs: 2 FLOPs per weight per token (qkv 3d^2, out d^2, mlp 8d^2), lm_head d * vocab.
    gemms = sum(costs[op].tensor_flops for op in ("qkv_proj", "out_proj", "mlp_up_gelu", "mlp_down", "lm_head"))
    assert gemms == 2 * 32 * (LAYERS * 12 * 64 * 64 + 64 * TINY.vocab)
    decode = TINY.op_costs(dims, Phase("decode", 2, 1, 20), "bf16")
    # A decode step reads every weight once: the lm_head reads the whole embedding.
    assert decode["lm_head"].bytes >= TINY.vocab * 64 * 2 and "sample" in decode
    # Attention = the family's decode read + the append: K and V rows read and written, one slot each.
    read = decode_attention.cost({"b": 2, "h": 2, "h_kv": 2, "c": 20, "d": 32}, "bf16").bytes
    assert decode["attention"].bytes == LAYERS * (read + 2 * 2 * (2 * 2 * 32 * 2) + 2 * 2 * 8)


def test_fused_op_costs_are_their_parts_less_the_intermediates():
    dims = TINY.dims(TINY.hf_config("tiny"))
    phase = Phase("decode", 2, 1, 20)
    plain = TINY.op_costs(dims, phase, "bf16")
    fused = TINY.op_costs(dims, phase, "bf16", frozenset({"norm_linear", "linear_residual", "kv_append"}))
    assert set(fused) == FUSED_DECODE
    stream = LAYERS * 2 * 64 * 2  # one [2 rows, 64] bf16 activation per layer, written and read back
    new_kv = LAYERS * 2 * (2 * 2) * 32 * 2  # per layer: K and V of 2 sequences x 2 heads x 32, bf16
    # Every FLOP survives a fusion; the bytes drop by each intermediate's round trip, and the
    # append's re-read of the new K and V is gone.
    for field in ("tensor_flops", "cuda_flops"):
        assert sum(getattr(c, field) for c in fused.values()) == sum(getattr(c, field) for c in plain.values())
    saved = sum(c.bytes for c in plain.values()) - sum(c.bytes for c in fused.values())
    assert saved == 2 * (4 * stream) + new_kv
    norm = layernorm.cost({"rows": 2, "hidden": 64}, "bf16")
    assert fused["layer_norm"] == norm  # ln_f only
    assert (
        fused["attention"].bytes
        == LAYERS * decode_attention.cost({"b": 2, "h": 2, "h_kv": 2, "c": 20, "d": 32}, "bf16").bytes
    )


def test_bf16_triton_logits_within_tolerance_and_reports_the_match_rate():
    loaded = build(TINY, "tiny", torch.bfloat16, torch.device("cpu"))
    kernels = make_kernel_set("triton", loaded.dtype, loaded.device, loaded.dims.head_dim, 1e-5)
    ids = torch.randint(0, TINY.vocab, (1, 8), generator=torch.Generator().manual_seed(1))
    runner = Runner(loaded, kernels, batch=1, prompt=8, new_tokens=2)
    tokens = checks.hf_greedy(loaded.hf, ids, 2)
    reference = fp32_reference(loaded, ids, tokens, memory.free_bytes(loaded.device))
    result = checks.compare(runner.prefill(ids), runner.generate(ids), reference, "bf16")
    assert result.logits_ok, result.describe()
    assert result.rel_error > 0 and reference.hf_error > 0  # bf16 rounding: neither is the fp32 answer
    assert not result.gating_tokens and 0 <= result.match_rate <= 1
    assert "vs fp32 (HF bf16: " in result.describe() and "greedy tokens match HF" in result.describe()


def test_a_swap_that_fails_its_check_is_reported_and_never_timed(tmp_path, monkeypatch):
    def gelu_without_bias(self, x, w, b):  # a plausible kernel bug: the bias never added
        return F.gelu(F.linear(x, w), approximate="tanh")

    monkeypatch.setattr(EagerKernels, "linear_gelu", gelu_without_bias)
    outcome = run_model(request(tmp_path, new_tokens=2))
    result = only_set(outcome)
    assert result.status == FAILED and "logits differ" in result.message
    assert not result.phases and outcome.exit_code == 1
    rows = read_results(tmp_path / "results.csv")
    assert (rows["status"] == FAILED).all() and rows["median_ms"].isna().all()


def test_weights_dir_loads_a_local_checkpoint(tmp_path):
    original = build(TINY, "tiny", torch.float32, torch.device("cpu"), seed=3)
    original.hf.save_pretrained(tmp_path)
    loaded = build(TINY, "tiny", torch.float32, torch.device("cpu"), weights_dir=tmp_path)
    assert torch.equal(loaded.weights.layers[1].fc_w, original.weights.layers[1].fc_w)
    assert loaded.config_name == "tiny"
    with pytest.raises(UserError, match="not a directory"):
        build(TINY, "tiny", torch.float32, torch.device("cpu"), weights_dir=tmp_path / "missing")


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ({"kernels": ["eager", "bogus"]}, "unknown kernel set 'bogus'"),
        ({"config": "gpt5"}, "unknown gpt2 config .gpt5."),
        ({"dtype": "fp8"}, "unknown dtype"),
        ({"prompt": 60, "new_tokens": 8}, "positions"),
    ],
)
def test_bad_requests_are_one_line_user_errors(tmp_path, fields, fragment):
    with pytest.raises(UserError, match=fragment):
        run_model(request(tmp_path, **fields))


def test_without_transformers_the_command_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` now raises ImportError
    result = CliRunner().invoke(app, ["model", "gpt2", "--device", "cpu", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert 'pip install "rooflint[models]"' in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_triton_decode_reads_the_paged_cache_in_place(monkeypatch):
    """Decode attention gets the cache's pools and block table, not a copy, and agrees with SDPA."""
    from rooflint.kernels.decode_attention import triton as decode_triton
    from rooflint.models.cache import KVCache
    from rooflint.models.kernel_sets import make_kernel_set

    batch, heads, d, length = 2, 3, 16, 21
    cache = KVCache(1, batch, heads, d, 40, torch.float32, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    for pool in cache.pools(0):
        pool.copy_(torch.randn(pool.shape, generator=gen))
    seen = {}
    real = decode_triton.triton_paged_decode

    def spy(q, k_pool, v_pool, table, *args):
        seen.update(k=k_pool, table=table)
        return real(q, k_pool, v_pool, table, *args)

    monkeypatch.setattr(decode_triton, "triton_paged_decode", spy)  # the kernel set imports it at call time
    q = torch.randn(batch, 1, 3, heads, d, generator=gen)[:, :, 0].transpose(1, 2)
    triton_set = make_kernel_set("triton", torch.float32, torch.device("cpu"), d, 1e-5)
    got = triton_set.attend_decode(q, cache, 0, length)
    assert seen["k"] is cache.k[0] and seen["table"] is cache.block_table
    want = make_kernel_set("eager", torch.float32, torch.device("cpu"), d, 1e-5).attend_decode(q, cache, 0, length)
    assert torch.allclose(got, want, atol=1e-5)


def test_phase_floor_is_bytes_over_bandwidth_or_matmul_flops_over_the_matmul_peak():
    from rooflint.core.family import Cost
    from rooflint.core.specs import get_spec
    from rooflint.models.rows import phase_floor

    h100 = get_spec("h100_sxm")
    decode = Cost(tensor_flops=2e9, cuda_flops=1e12, bytes=423.6e6)  # CUDA-core FLOPs are left out
    seconds, bound = phase_floor(decode, h100, "bf16")
    assert bound == "memory" and seconds == pytest.approx(423.6e6 / (h100.bandwidth_gbps * 1e9))
    prefill = Cost(tensor_flops=2.179e12, bytes=1e9)
    seconds, bound = phase_floor(prefill, h100, "bf16")
    assert bound == "compute" and seconds == pytest.approx(2.179e12 / (h100.tensor_peak_tflops("bf16") * 1e12))
    # fp32 matmuls run on the CUDA cores (TF32 off): judged against the fp32 CUDA-core peak.
    seconds, _ = phase_floor(prefill, h100, "fp32")
    assert seconds == pytest.approx(2.179e12 / (h100.cuda_peak_tflops("fp32") * 1e12))


@pytest.mark.parametrize("eps", [1e-5, 1e-6])
def test_triton_layer_norm_uses_the_models_eps(eps):
    """Rows whose variance (1e-6) is near eps: a kernel holding its own eps would be visibly off."""
    from rooflint.models.kernel_sets import make_kernel_set

    gen = torch.Generator().manual_seed(2)
    x = torch.randn(5, 96, generator=gen) * 1e-3
    w, b = torch.randn(96, generator=gen), torch.randn(96, generator=gen)
    triton_set = make_kernel_set("triton", torch.float32, torch.device("cpu"), 16, eps)
    assert triton_set.plan["layer_norm"] == "triton"
    want = F.layer_norm(x.double(), (96,), w.double(), b.double(), eps)
    assert torch.allclose(triton_set.layer_norm(x, w, b).double(), want, atol=1e-4, rtol=1e-4)
    other = 1e-6 if eps == 1e-5 else 1e-5
    assert not torch.allclose(F.layer_norm(x.double(), (96,), w.double(), b.double(), other), want, atol=1e-2)


def test_a_set_measured_in_its_own_process_rebuilds_the_same_model(tmp_path):
    # On a GPU every set runs in a spawned worker (models/isolation.py): it must rebuild the same
    # weights and inputs from the seed, pass the same checks and send its result back whole.
    # 8 greedy tokens: the same tokens and logits show the same model (eager_run compares 32 with HF).
    outcome = run_model(request(tmp_path, isolate=True, new_tokens=8))
    (result,) = outcome.sets
    assert result.status == OK, result.message
    assert result.check.passed and result.check.token_matches == result.check.tokens_compared == 2 * 8  # B x 8
    assert set(result.phases) == {"prefill", "decode", "generate"}
    assert set(result.phases["decode"].attribution.ops) >= UNFUSED - {"residual"} | {"sample"}
    frame = read_results(tmp_path / "results.csv")
    assert (frame[frame["variant"] == "eager"]["status"] == OK).all() and len(frame) > 3


class _DiesWhenUnpickled:
    """Unpickled in a spawned worker, ends that process at once (exit code 3)."""

    def __reduce__(self):
        import os

        return os._exit, (3,)


def test_a_worker_that_dies_is_its_sets_error_and_the_run_goes_on(tmp_path):
    from rooflint.models.isolation import run_set_isolated

    dying = request(tmp_path, isolate=True)
    dying.weights = _DiesWhenUnpickled()  # travels to the worker with the request
    result = run_set_isolated("eager", dying, CPU_SPEC)
    assert result.status == "error" and "died (exit code 3)" in result.message


def test_a_worker_error_comes_back_as_one_line(tmp_path):
    from rooflint.models.isolation import run_set_isolated

    result = run_set_isolated("eager", request(tmp_path, isolate=True, config="no-such-config"), CPU_SPEC)
    assert result.status == "error" and "UserError in its worker: unknown gpt2 config" in result.message


def test_a_set_worker_stopped_by_the_deadline_reports_one_line(monkeypatch):
    # The deadline's SIGINT reaches the worker as a KeyboardInterrupt with no message: still a row.
    from rooflint.models import isolation

    def interrupted(*_args):
        raise KeyboardInterrupt

    sent = []

    class Pipe:
        def send(self, result):
            sent.append(result)

        def close(self):
            pass

    monkeypatch.setattr(isolation, "_measure_alone", interrupted)
    isolation._worker(Pipe(), "compile", None, None, os.getppid())
    assert sent[0].status == "error" and sent[0].message == "KeyboardInterrupt in its worker"


def test_only_the_decode_steps_kernels_launch_inside_the_pdl_chain(monkeypatch):
    # kernels/common/pdl.py: PDL is for a decode step's chain of kernels, not the prompt's prefill.
    from rooflint.kernels.common import pdl
    from rooflint.models.kernel_sets import EagerKernels

    loaded = build(TINY, "tiny", torch.float32, torch.device("cpu"))
    kernels = make_kernel_set("eager", loaded.dtype, loaded.device, loaded.dims.head_dim, 1e-5)
    seen = []
    linear = EagerKernels.linear

    def spy(self, x, w, b, residual=None):
        seen.append((x.shape[0], pdl._IN_CHAIN.get()))
        return linear(self, x, w, b, residual)

    monkeypatch.setattr(EagerKernels, "linear", spy)
    runner = Runner(loaded, kernels, batch=1, prompt=8, new_tokens=2)
    runner.generate(torch.zeros((1, 8), dtype=torch.long))
    assert {chained for rows, chained in seen if rows == 8} == {False}  # the prompt's prefill
    assert {chained for rows, chained in seen if rows == 1} == {True}  # the decode step
    assert not pdl._IN_CHAIN.get()
