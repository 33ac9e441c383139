"""GPU tier: Triton's real autotuner with the picks store (kernels/common/autotune_picks.py). A second
process (here: the autotuner's memory and the store's state cleared) launches the stored pick without
timing any config, and computes the same output."""

from __future__ import annotations

import pytest
import torch

from rooflint.kernels.attention import triton as attention_triton
from rooflint.kernels.common import autotune_picks

pytestmark = pytest.mark.gpu


def test_the_next_process_runs_the_stored_pick_untimed(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOFLINT_CACHE", str(tmp_path))
    monkeypatch.delenv(autotune_picks.ENV, raising=False)
    kernel = attention_triton._attn_fwd_kernel
    monkeypatch.setattr(kernel, "cache", {})  # this process has timed nothing yet
    monkeypatch.setattr(autotune_picks, "_known", {})
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 4, 512, 64, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(3))
    first = attention_triton.triton_attention(q, k, v, True)
    picked = dict(kernel.cache)
    assert len(picked) == 1 and autotune_picks.store_path(torch.cuda.get_device_name()).exists()

    kernel.cache.clear()
    autotune_picks._known.clear()

    def no_timing(*args, **kwargs):
        raise AssertionError("a config was timed although the store holds this key's pick")

    monkeypatch.setattr(kernel, "_bench", no_timing)
    again = attention_triton.triton_attention(q, k, v, True)
    assert kernel.cache == picked and kernel.best_config is next(iter(picked.values()))
    assert torch.equal(again, first)


def test_a_timed_key_is_picked_in_rounds_and_the_output_is_the_pick_s(tmp_path, monkeypatch):
    """Triton's real autotuner with rooflint's recorder (kernels/common/autotune_rounds.py): every
    config that ran is timed in rounds, the lowest median is the pick, and the output the caller
    reads is the pick's (fp8 accumulates in another order under another tile, so bits tell)."""
    from rooflint.kernels.common import autotune_rounds
    from rooflint.kernels.scaled_gemm import triton as scaled_gemm_triton

    monkeypatch.setenv("ROOFLINT_CACHE", str(tmp_path))
    kernel = scaled_gemm_triton._scaled_gemm_kernel
    monkeypatch.setattr(kernel, "cache", {})
    monkeypatch.setattr(autotune_picks, "_known", {})
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(2048, 2048, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(1536, 2048, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(2048, 1, device="cuda", generator=gen), torch.rand(1, 1536, device="cuda", generator=gen)
    out = scaled_gemm_triton.scaled_gemm(a, b, sa, sb)
    (picked,) = kernel.cache.values()
    timings = kernel.configs_timings
    assert len(timings) >= 2 and all(any(c is known for known in kernel.configs) for c in timings)
    assert picked is min(timings, key=lambda config: timings[config][0])
    assert all(low <= median <= high for median, low, high in timings.values())
    assert kernel.best_config is picked and autotune_rounds.install(kernel).calls == []
    monkeypatch.setattr(kernel, "configs", [picked])  # the pick alone: no autotuning, no rounds
    kernel.cache.clear()
    assert torch.equal(scaled_gemm_triton.scaled_gemm(a, b, sa, sb), out)
