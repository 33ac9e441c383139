"""GPU tier: the decode GEMM that holds W in registers across the PDL wait (gelu_linear/skinny_pdl.cu),
against float64 over the shapes and fusions the model gives it and odd ones, fp16 and bf16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import assert_appended, assert_swiglu_matches_float64, projection_inputs, rope_tables

from rooflint.kernels.gelu_linear import skinny, skinny_pdl

pytestmark = pytest.mark.gpu

TOL = {torch.float16: 3e-3, torch.bfloat16: 2e-2}


@pytest.fixture(autouse=True)
def pdl_on(monkeypatch):
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90")
    monkeypatch.setenv("ROOFLINT_PDL", "1")
    # skinny_linear's largest decode GEMMs go to the ring kernel by default (its own tier:
    # test_gpu_skinny_ring.py); these tests hold skinny_pdl.cu's kernels to every shape.
    monkeypatch.setenv("ROOFLINT_RING", "0")


def ran_cuda(monkeypatch, kernel: str = "plan") -> list:
    """Record the calls that reach the CUDA kernel, so a test knows it did not fall back to Triton;
    ``kernel`` "held" or "streamed" forces that kernel ("plan": the one plan picks; "shared": the held
    kernel with its second tile in shared memory wherever that fits, however few its blocks)."""
    calls = []
    launch = skinny_pdl.launch
    streamed = {"plan": None, "held": False, "streamed": True, "shared": None}[kernel]
    flags = take_shared(monkeypatch) if kernel == "shared" else None

    def spy(*args):
        calls.append(args[0].shape)
        out = launch(*args, streamed=streamed)
        assert flags is None or flags[-1], "the shared tile fits this call but was not taken"
        return out

    monkeypatch.setattr(skinny_pdl, "launch", spy)
    return calls


def take_shared(monkeypatch) -> list:
    """Every held launch takes the shared tile where it fits (no fewest blocks); asserts each launch
    that the tile fits did take it. Returns the launches' shared flags."""
    monkeypatch.setattr(skinny_pdl, "SHARED_FILL", 0.0)
    flags = []
    call = skinny_pdl._call

    def spy(x, w, *args, **kwargs):
        flags.append(kwargs.get("shared", False))
        return call(x, w, *args, **kwargs)

    monkeypatch.setattr(skinny_pdl, "_call", spy)
    return flags


def takes(kernel: str, m: int, k: int) -> bool:
    """Whether the forced kernel splits this K at M rows (plan always takes these shapes)."""
    if kernel == "held":
        return skinny_pdl.steps_for(k, m) > 0
    if kernel == "shared":
        return skinny_pdl.shared_steps(k, m) > 0
    return kernel == "plan" or skinny_pdl.stream_steps(k, m) > 0


# (m, k, n): GPT-2's four projections at B=8, gpt2-medium's K=1024 and 4096, M of 1, 5, 12 and 16
# (two X tiles), N not a multiple of 16. Then rows only the streamed kernel splits: Llama-3.2-1B's
# down projection at B=8 and 16, Llama-3.1-8B's at B=1 (K = 14336, 7 chunks), odd counts of items
# (the loop's last has no partner buffer) and the shortest chunk (4 steps, 37 chunks). Then row
# blocks beyond the SMs, several a streamed block (forced below): a Llama-3.2-1B gate/up projection
# (1,024 row blocks) and odd N with K of one chunk.
SHAPES = [(8, 768, 2304), (8, 768, 768), (8, 768, 3072), (8, 3072, 768), (8, 1024, 1000), (3, 4096, 50),
          (1, 768, 37), (5, 1280, 130), (12, 768, 200), (16, 1024, 64),
          (8, 8192, 2048), (16, 8192, 72), (1, 14336, 200), (3, 6144, 50), (12, 5120, 130), (5, 18944, 40),
          (8, 2048, 16384), (1, 2048, 5000), (16, 1024, 4104), (7, 3072, 2900)]  # fmt: skip
# "shared" takes K = 2048-4096 at M <= 8 above: Llama-3.1-8B's K = 4096, odd row-block counts (a block's
# second row block past N), N not a multiple of 16 and 8 or 16 steps a warp.
KERNELS = ["plan", "held", "streamed", "shared"]


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kernel", KERNELS)
def test_linear_bias_gelu_residual_match_float64(m, k, n, dtype, kernel, monkeypatch):
    if not takes(kernel, m, k):
        pytest.skip(f"the {kernel} kernel takes no K = {k} at M = {m} (plan picks the other)")
    calls = ran_cuda(monkeypatch, kernel)
    x, w, b, r = projection_inputs(m, k, n, dtype)
    for gelu, bias, residual in ((False, b, None), (True, b, None), (False, b, r), (False, None, None)):
        got = skinny.skinny_linear(x, w, bias, gelu=gelu, residual=residual)
        want = F.linear(x.double(), w.double(), None if bias is None else bias.double())
        want = F.gelu(want, approximate="tanh") if gelu else want
        want = want + residual.double() if residual is not None else want
        err = (got.double() - want).abs().max().item()
        assert err <= TOL[dtype] * (1 + want.abs().max().item()), (gelu, bias is not None, residual is not None, err)
    assert len(calls) == 4


@pytest.mark.parametrize(
    "m,k,n",
    [(8, 768, 2304), (8, 768, 3072), (16, 1024, 96), (4, 1280, 70), (8, 8192, 96), (16, 6144, 96), (8, 1024, 4104),
     (1, 4096, 200), (8, 3072, 136)],
)  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kernel", KERNELS)
def test_folded_layer_norm_and_kv_append_match_float64(m, k, n, dtype, kernel, monkeypatch):
    if not takes(kernel, m, k):
        pytest.skip(f"the {kernel} kernel takes no K = {k} at M = {m} (plan picks the other)")
    calls = ran_cuda(monkeypatch, kernel)
    gen = torch.Generator(device="cuda").manual_seed(k + n)
    # rows with a large mean against their spread: the shift keeps the statistics from cancelling
    x = (torch.randn(m, k, device="cuda", generator=gen) + 30).to(dtype)
    w = (torch.randn(n, k, device="cuda", generator=gen) * k**-0.5).to(dtype)
    b = torch.randn(n, device="cuda", generator=gen).to(dtype)
    g = (torch.rand(k, device="cuda", generator=gen) + 0.5).to(dtype)
    beta = torch.randn(k, device="cuda", generator=gen).to(dtype)
    head_dim, heads = 16, 2  # the last 2 * 32 columns are K and V of 2 heads
    width = heads * head_dim
    pool = 4 * m * heads
    k_pool = torch.full((pool, head_dim), float("nan"), dtype=dtype, device="cuda")
    v_pool = torch.full((pool, head_dim), float("nan"), dtype=dtype, device="cuda")
    slots = torch.randperm(pool, device="cuda", generator=gen)[: m * heads].to(torch.int64)
    append = skinny.KVAppend(k_pool, v_pool, slots, n - 2 * width, heads, head_dim)
    folded = skinny.fold_layer_norm(g, beta, w, b)
    for gelu in (False, True):
        got = skinny.skinny_norm_linear(x, folded, 1e-5, gelu=gelu, append=append)
        want = F.linear(F.layer_norm(x.double(), (k,), g.double(), beta.double(), 1e-5), w.double(), b.double())
        want = F.gelu(want, approximate="tanh") if gelu else want
        err = (got.double() - want).abs().max().item()
        assert err <= 2 * TOL[dtype] * (1 + want.abs().max().item()), (gelu, err)
        k_new = got[:, n - 2 * width : n - width].reshape(m * heads, head_dim)
        v_new = got[:, n - width :].reshape(m * heads, head_dim)
        assert torch.equal(k_pool[slots], k_new) and torch.equal(v_pool[slots], v_new)
    untouched = torch.ones(pool, dtype=torch.bool, device="cuda")
    untouched[slots] = False
    assert torch.isnan(k_pool[untouched]).all()
    assert len(calls) == 2


def test_shapes_it_cannot_split_run_the_triton_kernel(monkeypatch):
    calls = ran_cuda(monkeypatch)
    x = torch.randn(8, 1600 + 16, device="cuda", dtype=torch.bfloat16)  # K = 1616: no whole-warp split
    w = torch.randn(48, 1616, device="cuda", dtype=torch.bfloat16)
    got = skinny.skinny_linear(x, w)
    assert not calls
    assert torch.allclose(got.double(), x.double() @ w.double().T, atol=0.5, rtol=2e-2)


# (m, k, ffn): Llama-3.2-1B's gate/up at B=8 and 1 (16 warps of 8 steps), K of 4 and 6 warps, ffn not a
# multiple of 16, and two X tiles at M > 8 (4 steps).
SWIGLU_SHAPES = [(8, 2048, 8192), (1, 2048, 8192), (5, 512, 1000), (8, 768, 40), (3, 1024, 4104), (12, 1024, 72),
                 (16, 512, 136), (2, 2048, 1000)]  # fmt: skip


@pytest.mark.parametrize("m,k,ffn", SWIGLU_SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shared", [False, True])
def test_swiglu_epilogue_matches_float64(m, k, ffn, dtype, shared, monkeypatch):
    """silu(gate) * up from the held kernel's two W tiles against float64, with and without bias and PDL;
    gate and up rounded to the dtype first, as the unfused GEMM's output is. ``shared``: the up rows
    in shared memory wherever that fits."""
    if shared and not skinny_pdl.shared_steps(k, m):
        pytest.skip(f"the shared tile takes no K = {k} at M = {m}")
    flags = take_shared(monkeypatch) if shared else []
    runs = ((False, False), (True, False), (True, True))  # (with bias, pdl)
    assert_swiglu_matches_float64(lambda x, w, bias, pdl: skinny_pdl.swiglu(x, w, bias, pdl=pdl), m, k, ffn, dtype,
                                  TOL[dtype], runs)  # fmt: skip
    assert flags == ([True] * 3 if shared else [])


def test_swiglu_in_a_pdl_chain_reads_the_new_x_and_matches_the_unfused_projection():
    """Under PDL, after a kernel that writes x: the fused result reads the new x (the wait holds), and
    equals silu applied to the plain held kernel's gate/up output within one rounding of the product."""
    from rooflint.kernels.common.pdl import decode_chain

    gen = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(8, 2048, device="cuda", generator=gen).to(torch.bfloat16)
    w = (torch.randn(2 * 8192, 2048, device="cuda", generator=gen) * 2048**-0.5).to(torch.bfloat16)
    source = torch.randn(8, 2048, device="cuda", generator=gen).to(torch.bfloat16)
    with decode_chain():
        for _ in range(3):
            x.copy_(source * 2)  # the write the next kernel must wait for
            got = skinny_pdl.swiglu(x, w, pdl=True)
            y = skinny.skinny_linear(x, w)
    torch.cuda.synchronize()
    want = (F.silu(y[:, :8192].float()) * y[:, 8192:].float()).to(torch.bfloat16)
    assert (got.float() - want.float()).abs().max().item() <= 2**-7 * (1 + want.float().abs().max().item())


@pytest.mark.parametrize("kernel", KERNELS)
def test_in_a_pdl_chain_each_kernel_reads_the_x_written_just_before_it(kernel, monkeypatch):
    """W is loaded before the PDL wait and X after it: three launches, each after a copy that writes a
    new x, each match that x's product (a stale x would match the previous one's)."""
    from rooflint.kernels.common.pdl import decode_chain

    m, k, n = 8, 4096, 6144  # Llama-3.1-8B's QKV projection: both kernels split K = 4096
    calls = ran_cuda(monkeypatch, kernel)
    gen = torch.Generator(device="cuda").manual_seed(11)
    w = (torch.randn(n, k, device="cuda", generator=gen) * k**-0.5).to(torch.bfloat16)
    sources = [torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(3)]
    x = torch.empty_like(sources[0])
    with decode_chain():
        outs = []
        for source in sources:
            x.copy_(source)
            outs.append(skinny.skinny_linear(x, w))
    torch.cuda.synchronize()
    for source, got in zip(sources, outs):
        want = source.double() @ w.double().T
        assert (got.double() - want).abs().max().item() <= TOL[torch.bfloat16] * (1 + want.abs().max().item())
    assert len(calls) == 3


# (m, tokens, start, heads, kv_heads, head_dim, k, bias): Llama-3.2-1B's QKV at B=8, 1 and 12 (two X
# tiles, 8 steps), Llama-3.1-8B's (head_dim 128) at B=1, Qwen2.5-0.5B's (bias, K = 896 at 8 steps),
# and a short prefill's rows (3 tokens a sequence) with an odd head count and head_dim 16.
ROPE_SHAPES = [(8, 1, 511, 32, 8, 64, 2048, False), (1, 1, 0, 32, 8, 64, 2048, False),
               (12, 1, 100, 32, 8, 64, 2048, False), (1, 1, 700, 32, 8, 128, 4096, False),
               (8, 1, 33, 14, 2, 64, 896, True), (6, 3, 5, 3, 1, 16, 512, True)]  # fmt: skip


@pytest.mark.parametrize("m,tokens,start,heads,kv_heads,d,k,bias", ROPE_SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shared", [False, True])
def test_qkv_rope_matches_float64_and_appends_the_rotated_k(m, tokens, start, heads, kv_heads, d, k, bias, dtype,
                                                            shared, monkeypatch):  # fmt: skip
    """The held kernel's RoPE epilogue against the float64 reference (the product rounded once, then
    rotated), with and without the append and PDL; the cache gets exactly the rotated K and the V.
    ``shared``: every other row block in shared memory wherever that fits."""
    if shared and not skinny_pdl.shared_steps(k, m):
        pytest.skip(f"the shared tile takes no K = {k} at M = {m}")
    flags = take_shared(monkeypatch) if shared else []
    gen = torch.Generator(device="cuda").manual_seed(m + start + d)
    n, width = (heads + 2 * kv_heads) * d, (heads + kv_heads) * d
    x = torch.randn(m, k, device="cuda", generator=gen).to(dtype)
    w = (torch.randn(n, k, device="cuda", generator=gen) * k**-0.5).to(dtype)
    b = torch.randn(n, device="cuda", generator=gen).to(dtype) if bias else None
    cos, sin = rope_tables(start + tokens + 8, d, dtype)
    pool = 4 * m * kv_heads
    slots = torch.randperm(pool, device="cuda", generator=gen)[: m * kv_heads]
    want = skinny_pdl.qkv_rope_reference(x, w, b, cos, sin, start, tokens, width, d)
    for appends, pdl in ((False, False), (True, False), (True, True)):
        k_pool = torch.full((pool, d), float("nan"), dtype=dtype, device="cuda")
        v_pool = torch.full((pool, d), float("nan"), dtype=dtype, device="cuda")
        append = skinny.KVAppend(k_pool, v_pool, slots, heads * d, kv_heads, d) if appends else None
        got = skinny_pdl.qkv_rope(x, w, b, cos, sin, start, tokens, width, d, append, pdl=pdl)
        err = (got.double() - want.double()).abs().max().item()
        assert err <= TOL[dtype] * (1 + want.double().abs().max().item()), (appends, pdl, err)
        if appends:
            assert_appended(got, k_pool, v_pool, slots, heads, width, d)
    assert flags == ([True] * 3 if shared else [])


def test_qkv_rope_is_the_unfused_projection_then_the_rope_kernel_within_one_rounding():
    """Llama-3.2-1B's decode step: the fused output against the held kernel's plain QKV product then
    models/ops/rope_append.py's kernel. The product is the same sum; only the fp32 rotation's
    contraction into FMAs may differ, by at most one rounding of the result."""
    from rooflint.models.ops.rope_append import rope_append

    m, heads, kv_heads, d, k, start = 8, 32, 8, 64, 2048, 300
    gen = torch.Generator(device="cuda").manual_seed(3)
    n, width = (heads + 2 * kv_heads) * d, (heads + kv_heads) * d
    x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    w = (torch.randn(n, k, device="cuda", generator=gen) * k**-0.5).to(torch.bfloat16)
    cos, sin = rope_tables(start + 8, d, torch.bfloat16)
    got = skinny_pdl.qkv_rope(x, w, None, cos, sin, start, 1, width, d)
    unfused = skinny_pdl.launch(x, w, None, False, None, torch.empty_like(got), None, None, streamed=False)
    rope_append(unfused, cos, sin, 1, start, heads, kv_heads, d, None)
    ulp = 2.0**-7 * unfused.double().abs()
    assert ((got.double() - unfused.double()).abs() <= ulp + 1e-6).all()


def rms_normalized(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) per row in float64: what the held kernel's ``rms`` scales a folded weight's product by."""
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


def no_shared(monkeypatch) -> None:
    """The held kernel without its shared tile, however many its blocks."""
    monkeypatch.setattr(skinny_pdl, "SHARED_FILL", float("inf"))


# (m, k, n): Llama-3.1-8B's QKV and o/gate-up widths at B=1 (K = 4096), Llama-3.2-1B's at B=8 (K = 2048),
# N not a multiple of 16 with an odd row-block count, odd M, 4 warps (K = 1024). The RMS builds stop at
# M = 8 and 16 or 8 steps (the CPU tests check the refusal beyond).
RMS_SHAPES = [(1, 4096, 6144), (8, 2048, 3072), (5, 4096, 200), (3, 2048, 1000), (8, 1024, 96), (7, 1024, 130)]


@pytest.mark.parametrize("m,k,n", RMS_SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shared", [False, True])
def test_folded_rms_norm_matches_float64(m, k, n, dtype, shared, monkeypatch):
    """The held kernel's ``rms`` (RMSNorm folded into W) against float64: the folded weight's product of
    x / rms(x), and within a rounding of each folded weight the unfused RMSNorm(x) * gamma then the
    projection; with and without bias. ``shared``: the second tile wherever it fits."""
    if shared and not skinny_pdl.shared_steps(k, m):
        pytest.skip(f"the shared tile takes no K = {k} at M = {m}")
    flags = take_shared(monkeypatch) if shared else None
    if not shared:
        no_shared(monkeypatch)
    gen = torch.Generator(device="cuda").manual_seed(m * 13 + k + n)
    x = (torch.randn(m, k, device="cuda", generator=gen) * 3).to(dtype)  # rms far from 1
    w = (torch.randn(n, k, device="cuda", generator=gen) * k**-0.5).to(dtype)
    b = torch.randn(n, device="cuda", generator=gen).to(dtype)
    gamma = (torch.rand(k, device="cuda", generator=gen) + 0.5).to(dtype)
    eps = 1e-5
    folded = skinny_pdl.fold_rms_norm(gamma, w)
    for bias in (None, b):
        out = torch.empty((m, n), dtype=dtype, device="cuda")
        got = skinny_pdl.launch(x, folded, bias, False, None, out, None, None, rms=eps)
        exact = F.linear(rms_normalized(x, eps), folded.double(), None if bias is None else bias.double())
        err = (got.double() - exact).abs().max().item()
        assert err <= TOL[dtype] * (1 + exact.abs().max().item()), (bias is not None, err)
        unfused = F.linear(rms_normalized(x, eps) * gamma.double(), w.double(), None if bias is None else bias.double())
        err = (got.double() - unfused).abs().max().item()
        assert err <= 2 * TOL[dtype] * (1 + unfused.abs().max().item()), (bias is not None, err)
    assert flags is None or flags == [True, True], flags


@pytest.mark.parametrize("m,k,ffn", [(8, 2048, 8192), (1, 2048, 1000), (5, 512, 1000), (6, 1024, 72)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_folded_rms_norm_with_swiglu_matches_float64(m, k, ffn, dtype):
    """SwiGLU's epilogue with the RMSNorm folded into both tiles: gate and up scaled by the row's 1 / rms
    before their bias, rounded, then silu(gate) * up."""
    gen = torch.Generator(device="cuda").manual_seed(m + k + ffn)
    x = (torch.randn(m, k, device="cuda", generator=gen) * 3).to(dtype)
    w = (torch.randn(2 * ffn, k, device="cuda", generator=gen) * k**-0.5).to(dtype)
    b = torch.randn(2 * ffn, device="cuda", generator=gen).to(dtype)
    gamma = (torch.rand(k, device="cuda", generator=gen) + 0.5).to(dtype)
    folded = skinny_pdl.fold_rms_norm(gamma, w)
    got = skinny_pdl.swiglu(x, folded, b, pdl=True, rms=1e-6)
    y = F.linear(rms_normalized(x, 1e-6), folded.double(), b.double())
    want = F.silu(y[:, :ffn].to(dtype).double()) * y[:, ffn:].to(dtype).double()
    err = (got.double() - want).abs().max().item()
    assert err <= TOL[dtype] * (1 + want.abs().max().item()), err


@pytest.mark.parametrize("m,tokens,start,heads,kv_heads,d,k,bias", [shape for shape in ROPE_SHAPES if shape[0] <= 8])
def test_folded_rms_norm_with_rope_scales_both_partners(m, tokens, start, heads, kv_heads, d, k, bias):
    """The RoPE epilogue with the RMSNorm folded in: each output and its rotate-half partner (summed in
    the same block) both scaled by the row's 1 / rms before the rotation."""
    dtype = torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(m * 3 + start + d)
    n, width = (heads + 2 * kv_heads) * d, (heads + kv_heads) * d
    x = (torch.randn(m, k, device="cuda", generator=gen) * 3).to(dtype)
    w = (torch.randn(n, k, device="cuda", generator=gen) * k**-0.5).to(dtype)
    b = torch.randn(n, device="cuda", generator=gen).to(dtype) if bias else None
    gamma = (torch.rand(k, device="cuda", generator=gen) + 0.5).to(dtype)
    cos, sin = rope_tables(start + tokens + 8, d, dtype)
    folded = skinny_pdl.fold_rms_norm(gamma, w)
    got = skinny_pdl.qkv_rope(x, folded, b, cos, sin, start, tokens, width, d, pdl=True, rms=1e-5)
    # the reference rounds the product to its input's dtype: float64 here, one rounding finer than the kernel
    want = skinny_pdl.qkv_rope_reference(rms_normalized(x, 1e-5), folded, b, cos, sin, start, tokens, width, d)
    err = (got.double() - want).abs().max().item()
    assert err <= TOL[dtype] * (1 + want.abs().max().item()), err


@pytest.mark.parametrize("k", [2048, 4096])
@pytest.mark.parametrize("m", [1, 8])
@pytest.mark.parametrize("extra", [0, 1, -1])
def test_shared_tile_with_single_row_blocks_after_the_pairs_matches_float64(k, m, extra, monkeypatch):
    """Row blocks past whole waves of paired blocks, at most one an SM (shared_pairs): the blocks after the
    pairs own one row block each; every output written once and right, N not a multiple of 16, plain,
    with a residual and with the RMSNorm folded in."""
    from rooflint.kernels import sm_count

    sms = sm_count(torch.device("cuda"), on_cpu=132)
    n = 16 * (2 * sms + sms // 2) + 16 * extra + 5  # after one paired wave, about half an SM's worth
    row_blocks = (n + 15) // 16
    pairs = skinny_pdl.shared_pairs(row_blocks, sms)
    assert 0 < row_blocks - 2 * pairs <= sms  # single row blocks follow the pairs
    flags = take_shared(monkeypatch)
    gen = torch.Generator(device="cuda").manual_seed(k + m + extra)
    x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    w = (torch.randn(n, k, device="cuda", generator=gen) * k**-0.5).to(torch.bfloat16)
    r = torch.randn(m, n, device="cuda", generator=gen).to(torch.bfloat16)
    for residual, rms in ((None, None), (r, None), (None, 1e-5)):
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        got = skinny_pdl.launch(x, w, None, False, residual, out, None, None, rms=rms)
        xs = rms_normalized(x, rms) if rms else x.double()
        want = F.linear(xs, w.double()) + (residual.double() if residual is not None else 0)
        err = (got.double() - want).abs().max().item()
        assert err <= TOL[torch.bfloat16] * (1 + want.abs().max().item()), (residual is not None, rms, err)
    assert flags == [True] * 3
