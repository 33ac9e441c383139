"""Autotune picks kept on disk per GPU model (kernels/common/autotune_picks.py), driven on a CPU by a
fake autotuner that behaves as Triton's does: it times every config the first time a key is launched
and keeps the winner in ``cache``."""

from __future__ import annotations

import json

import pytest

from rooflint.core import autotune_tally
from rooflint.kernels.common import autotune_picks


class FakeJit:
    def __init__(self, source: str) -> None:
        self.cache_key = f"hash-of-{source}"
        self.__name__ = "_fake_kernel"


class FakeAutotuner:
    """Triton's Autotuner as far as the store sees it: ``configs``, ``cache``, ``fn`` and ``[grid](...)``,
    which times every config at a key it has not seen (``timed`` counts those keys) and picks ``winner``."""

    def __init__(self, configs=("BLOCK_M: 64", "BLOCK_M: 128", "BLOCK_M: 256"), winner=2, source="v1") -> None:
        self.configs = list(configs)
        self.cache: dict = {}
        self.fn = FakeJit(source)
        self.winner = winner
        self.timed: list = []
        self.launched: list = []

    def __getitem__(self, grid):
        def run(n, dtype, causal=False):
            key = (n, causal, dtype)
            if key not in self.cache:
                self.timed.append(key)
                self.cache[key] = self.configs[self.winner]
            self.launched.append(self.cache[key])

        return run


H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


@pytest.fixture(autouse=True)
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOFLINT_CACHE", str(tmp_path))
    monkeypatch.delenv(autotune_picks.ENV, raising=False)
    monkeypatch.setattr(autotune_picks, "_known", {})
    gpu = {"name": H100}
    monkeypatch.setattr(autotune_picks, "_device_name", lambda device: gpu["name"])
    return gpu


def process(store, autotuner, *keys, gpu=H100):
    """One bench process: a fresh in-memory state, the kernel launched at each key (twice)."""
    autotune_picks._known.clear()
    store["name"] = gpu
    for n, dtype in keys:
        for _ in range(2):
            autotune_picks.launch(autotuner, (1,), "cuda", n, dtype, causal=True)
    return autotuner


def test_a_second_process_launches_the_first_ones_pick_without_timing(store, monkeypatch):
    monkeypatch.setitem(autotune_tally.PICKS, "hits", 0)
    monkeypatch.setitem(autotune_tally.PICKS, "misses", 0)
    first = process(store, FakeAutotuner(winner=2), (4096, "torch.bfloat16"), (1024, "torch.float8_e4m3fn"))
    assert first.timed == [(4096, True, "torch.bfloat16"), (1024, True, "torch.float8_e4m3fn")]
    # the next process's autotuner would pick config 0 if it timed: it must not time, and must run config 2
    assert autotune_tally.PICKS == {"hits": 0, "misses": 2}
    second = process(store, FakeAutotuner(winner=0), (4096, "torch.bfloat16"), (1024, "torch.float8_e4m3fn"))
    assert second.timed == [] and set(second.launched) == {"BLOCK_M: 256"}
    assert autotune_tally.PICKS == {"hits": 2, "misses": 2}  # the run record's "autotune" cache
    third = process(store, FakeAutotuner(winner=0), (8192, "torch.bfloat16"))  # a new key is timed, once
    assert third.timed == [(8192, True, "torch.bfloat16")]
    stored = json.loads(autotune_picks.store_path(H100).read_text())
    (picks,) = stored.values()
    assert picks == {"(4096, True, 'torch.bfloat16')": 2, "(1024, True, 'torch.float8_e4m3fn')": 2,
                     "(8192, True, 'torch.bfloat16')": 0}  # fmt: skip


def test_a_pick_is_kept_per_gpu_model_kernel_source_and_config_list(store):
    process(store, FakeAutotuner(winner=2), (4096, "torch.bfloat16"))
    assert process(store, FakeAutotuner(), (4096, "torch.bfloat16"), gpu=H200).timed  # H200 shares sm_90, not picks
    assert process(store, FakeAutotuner(source="v2"), (4096, "torch.bfloat16")).timed  # the kernel changed
    assert process(store, FakeAutotuner(configs=("a", "b"), winner=1), (4096, "torch.bfloat16")).timed  # other configs
    assert not process(store, FakeAutotuner(), (4096, "torch.bfloat16")).timed  # the same: served


def test_off_by_environment_and_unreadable_stores_time_again(store, monkeypatch):
    process(store, FakeAutotuner(), (4096, "torch.bfloat16"))
    path = autotune_picks.store_path(H100)
    path.write_text("{not json")
    again = process(store, FakeAutotuner(), (4096, "torch.bfloat16"))
    assert again.timed and json.loads(path.read_text())  # timed again and written whole
    monkeypatch.setenv(autotune_picks.ENV, "0")
    off = process(store, FakeAutotuner(), (4096, "torch.bfloat16"))
    assert off.timed  # the store is not read
    path.unlink()
    process(store, FakeAutotuner(), (512, "torch.float16"))
    assert not path.exists()  # nor written


def test_stored_entries_that_do_not_fit_are_ignored(store):
    autotuner = FakeAutotuner()
    path = autotune_picks.store_path(H100)
    path.parent.mkdir(parents=True)
    kernel = autotune_picks.kernel_id(autotuner)
    entries = {"(1, True, 'torch.bfloat16')": 7, "not a key(": 1, "(2, True, 'torch.bfloat16')": "1",
               "(3, True, 'torch.bfloat16')": 1}  # fmt: skip
    path.write_text(json.dumps({kernel: entries}))
    process(store, autotuner, (1, "torch.bfloat16"), (2, "torch.bfloat16"), (3, "torch.bfloat16"))
    assert autotuner.timed == [(1, True, "torch.bfloat16"), (2, True, "torch.bfloat16")]  # index 7, index "1"
    assert autotuner.launched[-1] == "BLOCK_M: 128"  # the stored index 1


def test_one_config_and_cpu_launches_touch_no_store(monkeypatch, tmp_path):
    monkeypatch.setattr(autotune_picks, "_device_name", lambda device: None)  # a CPU tensor
    autotuner = FakeAutotuner()
    autotune_picks.launch(autotuner, (1,), "cpu", 64, "torch.float32")
    assert autotuner.timed and not (tmp_path / "autotune").exists()
    single = FakeAutotuner(configs=("only",), winner=0)
    assert autotune_picks.restore(single, H100) == 0 and autotune_picks.remember(single, H100) == 0
