"""The ring kernel's host rules (kernels/gelu_linear/skinny_ring.py), on CPU: its stages within shared
memory, the even split of units between blocks that the workspace's two slots a block rely on, where it
runs by default, and its refusals. The kernel itself is checked against float64 by the GPU tier
(tests/gpu/test_gpu_skinny_ring.py)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rooflint.kernels.gelu_linear import skinny_ring

H200_SHARED = skinny_ring.ON_CPU_SHARED


@pytest.mark.parametrize(
    "m,k,planned",
    [(1, 4096, (1024, 6)), (1, 14336, (1024, 5)), (8, 2048, (2048, 2)), (8, 8192, (1024, 2)), (8, 16384, (0, 0)),
     (3, 1536, (512, 12)), (1, 1000, (0, 0))],
)  # fmt: skip
def test_plan_takes_a_tiles_whole_k_up_to_2048_columns_else_1024(m, k, planned):
    assert skinny_ring.plan(m, k, H200_SHARED) == planned


@given(st.integers(1, 8), st.integers(1, 64).map(lambda c: 512 * c), st.integers(100_000, 240_000))
def test_a_planned_block_fits_its_shared_memory_with_at_least_64_kb_of_stages(m, k, shared):
    chunk, stages = skinny_ring.plan(m, k, shared)
    if not chunk:
        # nothing fits: beside X no chunk that divides K has 64 KB in two or more whole stages
        for c in {skinny_ring.WHOLE_K, *skinny_ring.CHUNKS}:
            room = shared - skinny_ring.STATIC_BYTES - skinny_ring.shared_bytes(m, k, 0, c)
            whole = min(skinny_ring.MAX_STAGES, max(room, 0) // skinny_ring.stage_bytes(c))
            assert k % c or k > skinny_ring.WHOLE_K == c or whole < 2 or whole * skinny_ring.stage_bytes(c) < 65536
        return
    assert k % chunk == 0 and 2 <= stages <= skinny_ring.MAX_STAGES
    assert skinny_ring.shared_bytes(m, k, stages, chunk) + skinny_ring.STATIC_BYTES <= shared
    assert stages * skinny_ring.stage_bytes(chunk) >= skinny_ring.MIN_BYTES
    if k == skinny_ring.WHOLE_K and skinny_ring.stages_for(m, k, shared, k):
        assert chunk == k  # a tile's whole K in one stage where it fits
    else:  # else the first of CHUNKS that divides K and fits
        fitting = [c for c in skinny_ring.CHUNKS if k % c == 0 and skinny_ring.stages_for(m, k, shared, c)]
        assert chunk == fitting[0]


@given(st.integers(1, 400), st.integers(1, 40), st.integers(1, 140))
def test_blocks_split_the_units_evenly_and_share_at_most_their_first_and_last_tile(tiles, chunks, sms):
    units = tiles * chunks
    grid = min(sms, units)
    ranges = [(units * b // grid, units * (b + 1) // grid) for b in range(grid)]
    assert ranges[0][0] == 0 and ranges[-1][1] == units
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # every unit once, in order
    sizes = [end - begin for begin, end in ranges]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    for u in range(units):
        b = skinny_ring.owner(u, units, grid)
        assert ranges[b][0] <= u < ranges[b][1]
    counts = skinny_ring.contributors(tiles, chunks, grid)
    for t, count in enumerate(counts):
        owners = {skinny_ring.owner(u, units, grid) for u in range(t * chunks, (t + 1) * chunks)}
        assert count == len(owners)
        for b in owners if count > 1 else ():
            # a shared tile is its block's first or last: the workspace holds two partial tiles a block
            first, last = ranges[b][0] // chunks, (ranges[b][1] - 1) // chunks
            assert t in (first, last)


# (N W rows, K): Llama-3.1-8B's gate/up (both halves), down, QKV and o; Llama-3.2-1B's gate/up and down
LLAMA = {"8b gate/up": (28672, 4096), "8b down": (4096, 14336), "8b qkv": (6144, 4096), "8b o": (4096, 4096),
         "1b gate/up": (16384, 2048), "1b down": (2048, 8192)}  # fmt: skip


@pytest.mark.parametrize("value,takes", [(None, {"8b gate/up", "8b down", "1b gate/up"}), ("0", set()),
                                         ("1", set(LLAMA))])  # fmt: skip
def test_by_default_it_takes_the_gemms_that_stream_more_than_448_kb_an_sm(value, takes, monkeypatch):
    monkeypatch.setattr(skinny_ring, "fits", lambda m, k, device: True)
    if value is None:
        monkeypatch.delenv("ROOFLINT_RING", raising=False)
    else:
        monkeypatch.setenv("ROOFLINT_RING", value)
    cpu = torch.device("cpu")  # 132 SMs stand in (sm_count's on_cpu), an H100's or H200's count
    assert {name for name, (n, k) in LLAMA.items() if skinny_ring.pays(1, k, n, cpu)} == takes


def test_it_never_runs_where_it_does_not_fit(monkeypatch):
    monkeypatch.setenv("ROOFLINT_RING", "1")
    assert not skinny_ring.fits(1, 4096, torch.device("cpu"))
    assert not skinny_ring.pays(1, 4096, 28672, torch.device("cpu"))


def test_fits_says_yes_exactly_where_the_shape_and_the_gpu_allow(monkeypatch):
    # A stand-in sm_90 GPU with nvcc: fits is why_not's verdict on M and K alone (pays asks it per GEMM).
    from rooflint.engine import cuda_build

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(cuda_build, "nvcc_path", lambda: "/usr/local/cuda/bin/nvcc")
    monkeypatch.setattr(skinny_ring, "device_shared", lambda device: skinny_ring.ON_CPU_SHARED)
    gpu = torch.device("cuda", 0)
    assert skinny_ring.fits(8, 4096, gpu) and skinny_ring.fits(1, 14336, gpu) and skinny_ring.fits(1, 512, gpu)
    assert not skinny_ring.fits(9, 4096, gpu)  # rows past one n8 tile
    assert not skinny_ring.fits(0, 4096, gpu)
    assert not skinny_ring.fits(1, 1000, gpu)  # K not a multiple of 512
    assert not skinny_ring.fits(8, 65536, gpu)  # X's rows (1 MB) leave no room for stages
    monkeypatch.setattr(cuda_build, "nvcc_path", lambda: None)
    assert not skinny_ring.fits(8, 4096, gpu)
    monkeypatch.setattr(cuda_build, "nvcc_path", lambda: "/usr/local/cuda/bin/nvcc")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert not skinny_ring.fits(8, 4096, gpu)


def test_refusals_name_what_is_wrong():
    x = torch.zeros(1, 4096, dtype=torch.bfloat16)
    w = torch.zeros(64, 4096, dtype=torch.bfloat16)
    why = skinny_ring.why_not
    assert "fp16 or bf16" in why(x.float(), w.float())
    assert "does not match" in why(x, w[:, :2048])
    assert "1 to 8 rows" in why(torch.zeros(9, 4096, dtype=torch.bfloat16), w)
    assert "multiple of 512" in why(x[:, :1000], w[:, :1000])
    assert "[2 x 32, K] weight and no residual" in why(x, w, torch.zeros(1, 32, dtype=torch.bfloat16), ffn=32)
    assert "needs a CUDA GPU of sm_90" in why(x, w)  # this machine has none
    strided = torch.zeros(1, 128, dtype=torch.bfloat16)[:, ::2]  # [1, 64], every other column
    assert "output's rows contiguous" in why(x, w, out=strided)
    assert "output's rows contiguous" in why(x, w, residual=strided)
    assert "16-byte aligned x rows" in why(torch.zeros(1, 4097, dtype=torch.bfloat16)[:, 1:], w)
    assert "contiguous, 16-byte aligned weight" in why(x, torch.zeros(4096, 64, dtype=torch.bfloat16).T)
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        skinny_ring.linear(x, w)
    with pytest.raises(ValueError, match="even rows"):
        skinny_ring.swiglu(x, w[:63])
