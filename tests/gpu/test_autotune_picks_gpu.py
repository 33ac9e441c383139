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
