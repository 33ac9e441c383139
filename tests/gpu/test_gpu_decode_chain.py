"""GPU tier: the decode step's kernels with programmatic dependent launch, chained in a CUDA graph.

On sm_90 the decode GEMM and the decode-attention kernels launch with PDL and load constant bytes
(weights, earlier cache rows) into registers before they wait (kernels/common/pdl.py). A kernel that
read another kernel's output before its wait would pass alone and fail only in a chain, so this
chains them in one graph, as a decode step does, and checks every output against float64 after
each replay.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rooflint.kernels.common.pdl import decode_chain, pdl_enabled
from rooflint.kernels.decode_attention.plans import DecodeWorkspace
from rooflint.kernels.decode_attention.triton import triton_paged_decode
from rooflint.kernels.gelu_linear import skinny

pytestmark = pytest.mark.gpu

D_MODEL, HEADS, HEAD_DIM, FFN, ROWS, CAPACITY = 768, 12, 64, 3072, 8, 256


def test_pdl_is_on_in_a_decode_chain_where_the_gpu_has_it_unless_turned_off(monkeypatch):
    device = torch.device("cuda")
    hopper = torch.cuda.get_device_capability()[0] >= 9
    monkeypatch.delenv("ROOFLINT_PDL", raising=False)
    assert not pdl_enabled(device)  # a family benchmark keeps plain launches
    with decode_chain():
        assert pdl_enabled(device) == hopper
        monkeypatch.setenv("ROOFLINT_PDL", "0")
        assert not pdl_enabled(device)
    monkeypatch.setenv("ROOFLINT_PDL", "1")
    assert pdl_enabled(device) == hopper


@pytest.mark.parametrize("pdl", ["0", "1"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_chained_decode_kernels_in_a_graph_match_float64(dtype, pdl, monkeypatch):
    monkeypatch.setenv("ROOFLINT_PDL", pdl)
    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(0)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)

    ln_w, ln_b = randn(D_MODEL, scale=0.2) + 1, randn(D_MODEL, scale=0.2)
    qkv_w, qkv_b = randn(3 * D_MODEL, D_MODEL, scale=D_MODEL**-0.5), randn(3 * D_MODEL, scale=0.1)
    proj_w, proj_b = randn(D_MODEL, D_MODEL, scale=D_MODEL**-0.5), randn(D_MODEL, scale=0.1)
    up_w, down_w = randn(FFN, D_MODEL, scale=D_MODEL**-0.5), randn(D_MODEL, FFN, scale=FFN**-0.5)
    folded = skinny.fold_layer_norm(ln_w, ln_b, qkv_w, qkv_b)
    pages_per_head = CAPACITY // 16
    k_pool = randn(ROWS * HEADS * pages_per_head, 16, 1, HEAD_DIM)
    v_pool = randn(ROWS * HEADS * pages_per_head, 16, 1, HEAD_DIM)
    table = torch.arange(k_pool.shape[0], device=device, dtype=torch.int32).view(ROWS * HEADS, -1)
    length = 200  # the new token goes to position 199
    slots = (torch.arange(ROWS * HEADS, device=device) * CAPACITY + length - 1).to(torch.int64)
    x = randn(ROWS, D_MODEL)
    q_view = torch.empty((ROWS, HEADS, 1, HEAD_DIM), dtype=dtype, device=device)
    ws = DecodeWorkspace(q_view, HEADS, length)
    append = skinny.KVAppend(k_pool.view(-1, HEAD_DIM), v_pool.view(-1, HEAD_DIM), slots, D_MODEL, HEADS,
                                   HEAD_DIM)  # fmt: skip

    def step():
        qkv = skinny.skinny_norm_linear(x, folded, 1e-5, append=append)
        q = qkv[:, :D_MODEL].view(ROWS, HEADS, 1, HEAD_DIM)
        a = triton_paged_decode(q, k_pool, v_pool, table, HEADS, length, ws)
        h = skinny.skinny_linear(a.reshape(ROWS, D_MODEL), proj_w, proj_b, residual=x)  # split K
        u = skinny.skinny_linear(h, up_w, None, gelu=True)
        return qkv, skinny.skinny_linear(u, down_w, None, residual=h)  # split K

    def expected():
        x64 = x.double()
        qkv = F.linear(F.layer_norm(x64, (D_MODEL,), ln_w.double(), ln_b.double(), 1e-5), qkv_w.double(),
                       qkv_b.double())  # fmt: skip
        q, k_new, v_new = qkv.view(ROWS, 3, HEADS, HEAD_DIM).unbind(1)
        k = k_pool.double().view(ROWS, HEADS, CAPACITY, HEAD_DIM)[:, :, :length].clone()
        v = v_pool.double().view(ROWS, HEADS, CAPACITY, HEAD_DIM)[:, :, :length].clone()
        k[:, :, -1], v[:, :, -1] = k_new, v_new
        a = F.scaled_dot_product_attention(q[:, :, None], k, v).reshape(ROWS, D_MODEL)
        h = x64 + F.linear(a, proj_w.double(), proj_b.double())
        return h + F.linear(F.gelu(F.linear(h, up_w.double()), approximate="tanh"), down_w.double())

    step()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        qkv_out, out = step()
    want = expected()
    tolerance = 5e-2 if dtype == torch.bfloat16 else 1e-2
    for _ in range(3):  # replays: split-K counters reset, prefetches never read a stale output
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        error = ((out.double() - want).abs().max() / want.abs().max()).item()
        assert error < tolerance, f"relative error {error:.3g} exceeds {tolerance}"


def test_the_llama_norm_in_a_pdl_chain_reads_what_was_written_just_before_it():
    """Llama's residual RMSNorm right after a held GEMM that lets it in early, and before one it lets
    in early, in a graph over three steps with new inputs: launched with PDL every output equals the
    chain with the norm launched plainly, bit for bit (a norm that read its input before the wait
    would see another step's), and the step matches float64."""
    from rooflint.kernels.rmsnorm.triton import triton_rmsnorm
    from rooflint.kernels.swiglu.triton import triton_swiglu

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("PDL needs sm_90 (griddepcontrol)")
    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(3)
    d, ffn, rows = 2048, 8192, 8  # Llama-3.2-1B's widths at B=8

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(torch.bfloat16)

    o_w, norm_w = randn(d, d, scale=d**-0.5), randn(d, scale=0.2) + 1
    gate_up_w, down_w = randn(2 * ffn, d, scale=d**-0.5), randn(d, ffn, scale=ffn**-0.5)
    sources = [(randn(rows, d), randn(rows, d)) for _ in range(3)]
    x, residual = torch.empty_like(sources[0][0]), torch.empty_like(sources[0][1])

    def chain(pdl):
        outs = []
        for source_x, source_r in sources:
            x.copy_(source_x)
            residual.copy_(source_r)
            o = skinny.skinny_linear(x, o_w)  # the projection before the norm, which lets it in early
            y, h = triton_rmsnorm(o, norm_w, torch.empty_like(o), residual, torch.empty_like(o), pdl=pdl)
            gate_up = skinny.skinny_linear(y, gate_up_w)
            act = torch.empty(rows, ffn, dtype=x.dtype, device=device)
            act = triton_swiglu(gate_up[:, :ffn], gate_up[:, ffn:], act)
            outs.append((o, h, y, act, skinny.skinny_linear(act, down_w, None, residual=h)))
        return outs

    results = []
    with decode_chain():  # the GEMMs launch with PDL in both chains
        for pdl in (False, True):
            chain(pdl)  # compile outside the capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outs = chain(pdl)
            graph.replay()
            torch.cuda.synchronize()
            results.append(outs)
    for want, got in zip(*results):
        for a, b in zip(want, got):
            assert torch.equal(a, b)
    x64, r64 = (t.double() for t in sources[-1])
    h64 = x64 @ o_w.double().T + r64
    y64 = h64 * torch.rsqrt(h64.pow(2).mean(-1, keepdim=True) + 1e-6) * norm_w.double()
    gate_up64 = y64 @ gate_up_w.double().T
    out64 = h64 + (F.silu(gate_up64[:, :ffn]) * gate_up64[:, ffn:]) @ down_w.double().T
    error = ((results[1][-1][4].double() - out64).abs().max() / out64.abs().max()).item()
    assert error < 5e-2, f"relative error {error:.3g}"
