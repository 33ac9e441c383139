"""The persistent decode-layers kernel (models/ops/decode_layers.py) against float64, in Triton's CPU interpreter.

Under the interpreter the kernel runs one program that does every work item between its grid
barriers: these tests check the work decomposition (GEMM tiles and K splits, context splits and
their last-arrival combine, the cache append, the counters left for the next call), not the
concurrency. The model's switch (ROOFLINT_PERSISTENT=1) and the attribution's phase split are
checked too. Timing is never asserted.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from test_model_gpt2 import request as model_request

from rooflint.kernels.kv_cache import BLOCK_SIZE as PAGE
from rooflint.models.attribution import PERSISTENT_OP, Attribution, OpTime, split_phases
from rooflint.models.cache import KVCache
from rooflint.models.kernel_sets import make_kernel_set
from rooflint.models.model_run import run_model
from rooflint.models.ops import decode_layers as dl
from rooflint.models.ops.decode_layers import BLOCK_K, BLOCK_KEYS, MAX_ROWS, MAX_SPLITS, PHASES
from rooflint.outputs.results import OK

LAYERS = 2
EPS = 1e-5
CPU = torch.device("cpu")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Max |error| / max |reference| of the residual stream (and of the new K and V).
# fp32: the interpreter multiplies fp32 exactly, only summation order differs: 1e-4 is tight.
# 16-bit: every phase rounds its output to the dtype (the QKV output and the cache, the attention
# output, the residual stream twice a layer, the MLP hidden state), and the folded layer norms
# round W diag(gamma) and x - x[0] (not the normalised x) once more (the skinny GEMM's tests allow
# 3x their tolerance for that): ~16 roundings over two layers at a unit roundoff of 2^-11 (fp16) or
# 2^-9 (bf16). Measured: fp16 <= 1e-3 (as PyTorch's own fp16 layers), bf16 <= 2.2e-2 (PyTorch's
# bf16 layers <= 7e-3; the folded norms' extra roundings account for the rest).
TOL = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 5e-2}
# run() caches each case's kernel call for the three tests that check it: on one worker, so that it runs once.
pytestmark = pytest.mark.xdist_group("decode_layers")


@dataclass(frozen=True)
class Case:
    rows: int
    hidden: int
    heads: int
    ffn: int
    length: int  # cached tokens once the new one is appended
    proj_splits: int | None = None  # the out-projection's K splits; None: plan()'s for one program
    down_splits: int | None = None  # the MLP down-projection's
    splits: int | None = None  # context splits of the attention; None: attention_splits' own choice


CASES = {
    # d = 64 < BLOCK_K; 37 tokens = 2 pages + 5, one partial key tile
    "1row-d64": Case(1, 64, 2, 128, 37),
    # d = 96 and ffn = 160 are no multiple of BLOCK_K, 3 heads of 32; 83 = 5 pages + 3, key tiles of 64 + 19
    "3rows-d96": Case(3, 96, 3, 160, 83),
    # MAX_ROWS rows, 100 tokens = 6 pages + 4
    "16rows-d64": Case(16, 64, 2, 256, 100),
}
SPLIT_CASES = {
    # ffn = 256: the down-projection in two whole K steps; 150 keys: 3 splits of 64 (the last 22)
    "down-split": Case(3, 64, 2, 256, 150, proj_splits=1, down_splits=2, splits=3),
    # d = 160 (5 heads of 32): the out-projection in 128 + 32; ffn = 320: 128 + 128 + 64
    "both-split": Case(2, 160, 5, 320, 150, proj_splits=2, down_splits=3, splits=3),
}
ALL_CASES = {**CASES, **SPLIT_CASES}
PLAIN_RUNS = [(name, dtype) for name in CASES for dtype in DTYPES]
SPLIT_RUNS = [("down-split", torch.float32), ("down-split", torch.bfloat16), ("both-split", torch.float32)]


def run_id(run) -> str:
    name, dtype = run
    return f"{name}-{str(dtype).removeprefix('torch.')}"


def make_layers(case: Case, dtype, gen) -> list[SimpleNamespace]:
    """GPT-2 layers (models/gpt2.py Layer's fields) with non-trivial norms and biases."""

    def randn(*shape, scale=1.0, shift=0.0):
        return (torch.randn(shape, generator=gen) * scale + shift).to(dtype)

    def layer(d, f):
        return SimpleNamespace(
            ln1_w=randn(d, scale=0.2, shift=1.0), ln1_b=randn(d, scale=0.1),
            qkv_w=randn(3 * d, d, scale=d**-0.5), qkv_b=randn(3 * d, scale=0.1),
            proj_w=randn(d, d, scale=d**-0.5), proj_b=randn(d, scale=0.1),
            ln2_w=randn(d, scale=0.2, shift=1.0), ln2_b=randn(d, scale=0.1),
            fc_w=randn(f, d, scale=d**-0.5), fc_b=randn(f, scale=0.1),
            down_w=randn(d, f, scale=f**-0.5), down_b=randn(d, scale=0.1),
        )  # fmt: skip

    return [layer(case.hidden, case.ffn) for _ in range(LAYERS)]


def make_cache(case: Case, dtype, gen):
    """A KVCache with a spare page, random context in its pools, and a shuffled block table (the
    kernel must read and write through it). The new token's slots and every slot past it are NaN:
    the kernel must write the former before reading it, and never read the latter.

    Returns (cache, table, slot_of): slot_of[b * H + h, t] is the pool row of token t."""
    heads, head_dim = case.heads, case.hidden // case.heads
    cache = KVCache(LAYERS, case.rows, heads, head_dim, case.length + PAGE, dtype, CPU)
    per_head = cache.capacity // PAGE
    table = torch.randperm(cache.pages, generator=gen).to(torch.int32).view(-1, per_head)
    t = torch.arange(cache.capacity)
    slot_of = table.long()[:, t // PAGE] * PAGE + t % PAGE
    # the test's slot arithmetic is the cache's, for its own (identity) table
    identity = cache.block_table.long()[:, t // PAGE] * PAGE + t % PAGE
    assert torch.equal(identity[:, case.length - 1], cache.slots(case.length - 1, 1))
    for pool in (cache.k_layers, cache.v_layers):
        pool.copy_(torch.randn(pool.shape, generator=gen))
        rows = pool.view(LAYERS, -1, head_dim)
        rows[:, slot_of[:, case.length - 1 :].reshape(-1)] = float("nan")
    return cache, table, slot_of


def layer_norm64(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w.double(), b.double(), EPS)


def gelu_tanh64(u):
    return 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))


def reference(x, layers, keys, values, heads):
    """The layers in float64 from the same (rounded) inputs. keys / values [L, M*H, length-1, hd]:
    the context before the new token. Returns (x, new K [L, M*H, hd], new V [L, M*H, hd])."""
    x = x.double()
    m, d = x.shape
    head_dim = d // heads
    new_k, new_v = [], []
    for index, w in enumerate(layers):
        h = layer_norm64(x, w.ln1_w, w.ln1_b)
        qkv = h @ w.qkv_w.double().T + w.qkv_b.double()
        q, k, v = qkv.view(m, 3, heads, head_dim).unbind(1)  # [M, H, hd] each
        k_all = torch.cat([keys[index].view(m, heads, -1, head_dim), k[:, :, None]], dim=2)
        v_all = torch.cat([values[index].view(m, heads, -1, head_dim), v[:, :, None]], dim=2)
        scores = q[:, :, None] @ k_all.transpose(-1, -2) / math.sqrt(head_dim)  # [M, H, 1, length]
        attn = (torch.softmax(scores, dim=-1) @ v_all).reshape(m, d)
        x = x + attn @ w.proj_w.double().T + w.proj_b.double()
        h = layer_norm64(x, w.ln2_w, w.ln2_b)
        u = gelu_tanh64(h @ w.fc_w.double().T + w.fc_b.double())
        x = x + u @ w.down_w.double().T + w.down_b.double()
        new_k.append(k.reshape(m * heads, head_dim))
        new_v.append(v.reshape(m * heads, head_dim))
    return x, torch.stack(new_k), torch.stack(new_v)


def launch_plan(case: Case) -> dl.Plan:
    if case.proj_splits is None:
        return dl.plan(case.hidden, case.ffn, 1)
    return dl.Plan(1, case.proj_splits, case.down_splits)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits, so that NaN compares equal to the same NaN."""
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def rel_error(got, want) -> float:
    return ((got.double() - want).abs().max() / want.abs().max()).item()


@functools.cache
def run(name: str, dtype):
    """One decode_layers call of a case (cached: several tests check the same call). The partial
    buffers start as NaN, so that what a call wrote into them shows."""
    case = ALL_CASES[name]
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    layers = make_layers(case, dtype, gen)
    cache, table, slot_of = make_cache(case, dtype, gen)
    x0 = (torch.randn(case.rows, case.hidden, generator=gen) * 2 + 1).to(dtype)  # rows with a mean
    stack = dl.LayerStack.of(layers)
    launch = launch_plan(case)
    ws = dl.Workspace(case.rows, stack, case.heads, CPU, dtype, max(launch.proj_splits, launch.down_splits))
    for buffer in (ws.part_acc, ws.part_ml, ws.gemm_part):
        buffer.fill_(float("nan"))
    slots = slot_of[:, case.length - 1].contiguous()
    k_before, v_before = cache.k_layers.clone(), cache.v_layers.clone()
    x = x0.clone()

    def call(x, k_pool, v_pool):
        return dl.decode_layers(x, stack, k_pool, v_pool, table, slots, case.length, case.heads, EPS, ws, launch,
                                splits=case.splits)  # fmt: skip

    out = call(x, cache.k_layers, cache.v_layers)
    head_dim = case.hidden // case.heads
    context = slot_of[:, : case.length - 1]
    keys = k_before.view(LAYERS, -1, head_dim)[:, context].double()  # [L, M*H, length-1, hd]
    values = v_before.view(LAYERS, -1, head_dim)[:, context].double()
    want, want_k, want_v = reference(x0, layers, keys, values, case.heads)
    return SimpleNamespace(
        case=case, layers=layers, stack=stack, launch=launch, ws=ws, call=call, x0=x0, x=x, out=out,
        k_before=k_before, v_before=v_before, k_after=cache.k_layers.clone(), v_after=cache.v_layers.clone(),
        slots=slots, want=want, want_k=want_k, want_v=want_v,
        # the workspace as the call left it (a later call on it changes it)
        qkv=ws.qkv.clone(), part_ml=ws.part_ml.clone(), gemm_part=ws.gemm_part.clone(),
        head_count=ws.head_count.clone(), gemm_count=ws.gemm_count.clone(), barrier=ws.barrier.clone(),
    )  # fmt: skip


@pytest.mark.parametrize("name,dtype", PLAIN_RUNS, ids=[run_id(r) for r in PLAIN_RUNS])
def test_layers_match_float64(name, dtype):
    r = run(name, dtype)
    assert r.out.data_ptr() == r.x.data_ptr()  # in place, the residual stream returned
    assert r.out.shape == r.x0.shape and r.out.dtype == dtype
    assert torch.isfinite(r.out).all()  # no NaN past the context, nor from an unwritten slot, got in
    error = rel_error(r.out, r.want)
    assert error <= TOL[dtype], error
    # the layers did change the stream: a kernel that wrote nothing would not be within tolerance
    assert rel_error(r.x0, r.want) > 0.1
    # One context split and whole-K GEMMs here: the partial buffers are never touched.
    assert dl.attention_splits(r.case.rows, r.case.heads, r.case.length, 1, r.case.splits)[0] == 1
    assert r.launch.proj_splits == r.launch.down_splits == 1
    assert r.part_ml.isnan().all() and r.gemm_part.isnan().all()


@pytest.mark.parametrize("name,dtype", PLAIN_RUNS + SPLIT_RUNS, ids=[run_id(r) for r in PLAIN_RUNS + SPLIT_RUNS])
def test_new_k_and_v_land_in_their_slots_and_nothing_else_changes(name, dtype):
    r = run(name, dtype)
    head_dim = r.case.hidden // r.case.heads
    for before, after, want in ((r.k_before, r.k_after, r.want_k), (r.v_before, r.v_after, r.want_v)):
        rows = after.view(LAYERS, -1, head_dim)
        new = rows[:, r.slots]  # [L, M*H, hd]
        assert torch.isfinite(new).all()
        for layer in range(LAYERS):
            error = rel_error(new[layer], want[layer])
            assert error <= TOL[dtype], (layer, error)
        untouched = torch.ones(rows.shape[1], dtype=torch.bool)
        untouched[r.slots] = False
        assert torch.equal(bits(rows[:, untouched]), bits(before.view(LAYERS, -1, head_dim)[:, untouched]))
    # The last layer's new K and V are exactly the QKV phase's K and V columns (no second rounding).
    d = r.case.hidden
    k_cols = r.qkv[:, d : 2 * d].reshape(-1, head_dim)
    v_cols = r.qkv[:, 2 * d :].reshape(-1, head_dim)
    assert torch.equal(r.k_after.view(LAYERS, -1, head_dim)[-1, r.slots], k_cols)
    assert torch.equal(r.v_after.view(LAYERS, -1, head_dim)[-1, r.slots], v_cols)


@pytest.mark.parametrize("name,dtype", SPLIT_RUNS, ids=[run_id(r) for r in SPLIT_RUNS])
def test_split_paths_match_float64_and_leave_the_workspace_ready_for_the_next_call(name, dtype):
    r = run(name, dtype)
    case, launch, ws = r.case, r.launch, r.ws
    # The context really is split the asked number of ways, in whole key tiles.
    splits, chunk = dl.attention_splits(case.rows, case.heads, case.length, launch.programs, case.splits)
    assert splits == case.splits > 1 and chunk % BLOCK_KEYS == 0 and (splits - 1) * chunk < case.length
    # The GEMMs' K splits are whole BLOCK_K steps, more than one.
    for k, want in ((case.hidden, launch.proj_splits), (case.ffn, launch.down_splits)):
        step = dl.split_chunk(k, want)
        assert step % BLOCK_K == 0 and -(-k // step) == want
    assert launch.down_splits > 1
    error = rel_error(r.out, r.want)
    assert error <= TOL[dtype], error
    # Every head's splits published a partial (m, l), the rest of its MAX_SPLITS rows untouched; the
    # last phase's K splits published theirs.
    heads = case.rows * case.heads
    assert torch.isfinite(r.part_ml[:heads, :splits]).all() and r.part_ml[:heads, splits:].isnan().all()
    parts = r.gemm_part[: launch.down_splits, : case.hidden]
    assert torch.isfinite(parts[:, :, : case.rows]).all() and parts[:, :, case.rows :].isnan().all()
    # The arrival counters and the barrier's count are back at zero; the generation counted 5 a layer.
    assert not r.head_count.any() and not r.gemm_count.any()
    assert r.barrier.tolist() == [0, 5 * LAYERS]
    # The same workspace again (a CUDA-graph replay), on the same inputs: the same result.
    k_pool, v_pool = r.k_before.clone(), r.v_before.clone()
    again = r.x0.clone()
    r.call(again, k_pool, v_pool)
    assert torch.equal(again, r.out)
    assert torch.equal(bits(k_pool), bits(r.k_after)) and torch.equal(bits(v_pool), bits(r.v_after))
    assert not ws.head_count.any() and not ws.gemm_count.any()
    assert ws.barrier.tolist() == [0, 10 * LAYERS]


def test_more_rows_than_the_kernel_takes_fractional_k_splits_and_small_workspaces_are_refused():
    case = Case(2, 64, 2, 256, 20)
    gen = torch.Generator().manual_seed(5)
    stack = dl.LayerStack.of(make_layers(case, torch.float32, gen))
    cache, table, slot_of = make_cache(case, torch.float32, gen)
    k_before = cache.k_layers.clone()

    def call(x, launch):
        ws = dl.Workspace(x.shape[0], stack, case.heads, CPU, x.dtype, max(launch.proj_splits, launch.down_splits))
        slots = torch.zeros(x.shape[0] * case.heads, dtype=torch.int64)
        dl.decode_layers(x, stack, cache.k_layers, cache.v_layers, table, slots, case.length, case.heads, EPS, ws,
                         launch)  # fmt: skip

    good = dl.plan(case.hidden, case.ffn, 1)
    too_many = torch.ones(MAX_ROWS + 1, case.hidden)
    with pytest.raises(ValueError, match=f"at most {MAX_ROWS} rows"):
        call(too_many, good)
    with pytest.raises(ValueError, match="contiguous"):
        call(torch.ones(case.rows, 2 * case.hidden)[:, ::2], good)
    x = torch.ones(case.rows, case.hidden)
    # ffn 256 in 3 splits would be 128 + 128 + 0; d = 64 in 2 splits would be 128 + nothing
    for bad in (dl.Plan(1, 1, 3), dl.Plan(1, 2, 1)):
        with pytest.raises(ValueError, match="whole K steps"):
            call(x, bad)
    # a workspace built for fewer rows, or for fewer K splits than the plan asks, would be written
    # out of bounds: refused
    slots = torch.zeros(case.rows * case.heads, dtype=torch.int64)
    for ws_rows, ws_splits, launch in ((case.rows - 1, 1, good), (case.rows, 1, dl.Plan(1, 1, 2))):
        small = dl.Workspace(ws_rows, stack, case.heads, CPU, x.dtype, ws_splits)
        with pytest.raises(ValueError, match="workspace was built for"):
            dl.decode_layers(x, stack, cache.k_layers, cache.v_layers, table, slots, case.length, case.heads, EPS,
                             small, launch)  # fmt: skip
    # refused before anything ran: the stream and the cache are as they were
    assert (too_many == 1).all() and (x == 1).all()
    assert torch.equal(bits(cache.k_layers), bits(k_before))


@pytest.mark.parametrize("hidden,ffn", [(768, 3072), (64, 256), (96, 160), (1600, 6400)])
@pytest.mark.parametrize("programs", [1, 8, 132, 264])
def test_plan_splits_are_whole_k_steps_that_decode_layers_accepts(hidden, ffn, programs):
    launch = dl.plan(hidden, ffn, programs)
    for k, splits in ((hidden, launch.proj_splits), (ffn, launch.down_splits)):
        step = dl.split_chunk(k, splits)
        assert 1 <= splits <= 8 and step % BLOCK_K == 0 and -(-k // step) == splits


@pytest.mark.parametrize("length", [1, 15, 64, 65, 150, 1000, 4096])
@pytest.mark.parametrize("rows,heads,programs,want", [(1, 2, 1, None), (8, 12, 264, None), (1, 12, 264, None),
                                                      (3, 2, 1, 3), (1, 2, 1, 40)])  # fmt: skip
def test_attention_splits_cover_the_context_in_whole_key_tiles(length, rows, heads, programs, want):
    splits, chunk = dl.attention_splits(rows, heads, length, programs, want)
    assert 1 <= splits <= MAX_SPLITS and chunk % BLOCK_KEYS == 0
    assert (splits - 1) * chunk < length <= splits * chunk  # every split has keys, all keys are covered
    if want is not None:
        assert splits <= want


def synthetic_stamps(layers: int, gen) -> torch.Tensor:
    steps = torch.randint(1, 1000, (1 + 5 * layers,), generator=gen)
    return (10**9 + torch.cumsum(steps, 0)).to(torch.int64)


@pytest.mark.parametrize("layers", [1, 3, 12])
def test_phase_shares_are_each_phases_summed_spans_over_the_kernels_time(layers):
    stamps = synthetic_stamps(layers, torch.Generator().manual_seed(layers))
    shares = dl.phase_shares(stamps)
    assert list(shares) == list(PHASES)
    clocks = stamps.tolist()
    total = clocks[-1] - clocks[0]
    for i, name in enumerate(PHASES):
        spans = [clocks[1 + 5 * layer + i] - clocks[5 * layer + i] for layer in range(layers)]
        share, calls = shares[name]
        assert share == pytest.approx(sum(spans) / total) and calls == layers
    assert sum(share for share, _ in shares.values()) == pytest.approx(1.0)


def test_phase_shares_of_a_call_that_kept_no_clock_are_none():
    stamps = synthetic_stamps(2, torch.Generator().manual_seed(0))
    assert dl.phase_shares(torch.zeros_like(stamps)) is None  # no clock kept (the interpreter, stamps=False)
    unset = stamps.clone()
    unset[0] = 0
    assert dl.phase_shares(unset) is None
    for i, value in ((4, None), (7, 0)):  # a stamp equal to the one before it, or below it
        broken = stamps.clone()
        broken[i] = broken[i - 1] if value is None else value
        assert dl.phase_shares(broken) is None


def attribution_with_the_persistent_op() -> Attribution:
    ops = {
        "embedding": OpTime(0.5, 1, Counter({"embedding_kernel": 0.5})),
        PERSISTENT_OP: OpTime(8.0, 1, Counter({"_decode_layers_kernel": 7.5, "memset": 0.5})),
        "lm_head": OpTime(1.5, 1, Counter({"gemm": 1.5})),
    }
    return Attribution(ops, 0.25, 11.0, "device kernels")


def test_split_phases_splits_the_persistent_op_by_its_shares_and_keeps_the_total():
    shares = dict(zip(PHASES, [(0.3, 12), (0.25, 12), (0.1, 12), (0.2, 12), (0.15, 12)]))
    attribution = attribution_with_the_persistent_op()
    total = attribution.total_ms
    split = split_phases(attribution, shares)
    assert PERSISTENT_OP not in split.ops
    assert set(split.ops) == {"embedding", "lm_head", *PHASES}
    for name, (share, calls) in shares.items():
        op = split.ops[name]
        assert op.ms == pytest.approx(8.0 * share) and op.calls == calls
        assert op.kernels == {"_decode_layers_kernel": pytest.approx(7.5 * share), "memset": pytest.approx(0.5 * share)}
    original = attribution_with_the_persistent_op()
    for name in ("embedding", "lm_head"):
        assert split.ops[name] == original.ops[name]
    assert split.total_ms == pytest.approx(total)
    assert (split.unattributed_ms, split.span_ms, split.mode) == (0.25, 11.0, "device kernels")


@pytest.mark.parametrize("shares", [None, {}])
def test_split_phases_without_shares_leaves_the_op_whole(shares):
    split = split_phases(attribution_with_the_persistent_op(), shares)
    assert split.ops == attribution_with_the_persistent_op().ops


def test_split_phases_without_the_persistent_op_changes_nothing():
    attribution = attribution_with_the_persistent_op()
    del attribution.ops[PERSISTENT_OP]
    split = split_phases(attribution, dict.fromkeys(PHASES, (0.2, 1)))
    assert set(split.ops) == {"embedding", "lm_head"}


@pytest.mark.parametrize("value,on", [("1", True), ("0", False), ("", False), (None, False)])
def test_only_rooflint_persistent_1_turns_the_persistent_kernel_on(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv("ROOFLINT_PERSISTENT", raising=False)
    else:
        monkeypatch.setenv("ROOFLINT_PERSISTENT", value)
    kernels = make_kernel_set("triton", torch.float32, CPU, 32, EPS)
    assert kernels.persistent is on
    assert kernels.plan["decoder_layers"].startswith("triton, one persistent kernel" if on else "off:")
    assert ("decoder_layers" in kernels.fusions(MAX_ROWS, True)) is on
    # never for prefill, nor above the rows the kernel takes
    assert "decoder_layers" not in kernels.fusions(4, False) | kernels.fusions(MAX_ROWS + 1, True)
    assert kernels.phase_shares() is None  # nothing ran yet
    assert "decoder_layers" not in make_kernel_set("eager", torch.float32, CPU, 32, EPS).fusions(4, True)


def test_a_persistent_switch_that_is_neither_0_nor_1_is_refused(monkeypatch):
    from rooflint.core.errors import UserError

    monkeypatch.setenv("ROOFLINT_PERSISTENT", "true")  # once read as "off" without a word
    with pytest.raises(UserError, match="ROOFLINT_PERSISTENT='true' is not a switch"):
        make_kernel_set("triton", torch.float32, CPU, 32, EPS)


def plan_of(result) -> dict[str, str]:
    return dict(item.split("=", 1) for item in result.plan.split("; "))


def test_model_decode_with_the_persistent_kernel_matches_hf(monkeypatch, tmp_path):
    # Without it (its default), the same request is tests/test_model_gpt2.py's triton_run, checked there.
    monkeypatch.setenv("ROOFLINT_PERSISTENT", "1")
    # Two sequences, a 4-token prompt and 3 greedy tokens: every decode step runs at 2 rows.
    outcome = run_model(model_request(tmp_path, kernels=["triton"], batch=2, seq=24, prompt=4, new_tokens=3))
    (result,) = outcome.sets
    assert result.status == OK, result.message
    plan = plan_of(result)
    fused = "norm_linear, linear_residual, kv_append"
    assert plan["decoder_layers"].startswith("triton, one persistent kernel"), result.plan
    assert plan["fusions"] == f"<= 16 rows: {fused}, decoder_layers", result.plan
    assert result.check.token_matches == result.check.tokens_compared == 2 * 3
    assert result.check.rel_error < 1e-4
    decode = result.phases["decode"].attribution
    # One kernel for both layers; on a CPU it keeps no clock, so its op is not split into phases.
    assert set(decode.ops) == {"embedding", PERSISTENT_OP, "layer_norm", "lm_head", "sample"}
    assert decode.ops[PERSISTENT_OP].calls == 1 and decode.ops[PERSISTENT_OP].ms > 0
    assert PERSISTENT_OP not in result.phases["prefill"].attribution.ops
