"""Between cases the worker frees the last case's memory: a full garbage collection only where the
GPU still holds a share of its memory (it costs 0.2 s or more a call in a worker with torch and
its compiled graphs loaded), CUDA's cached blocks always; on the CPU and after an out of memory, always."""

from __future__ import annotations

import types

import pytest
import torch

from rooflint.engine import worker


@pytest.fixture
def fake_gpu(monkeypatch):
    """A 64 GiB GPU whose allocated bytes the test sets; counts collections and cache releases."""
    state = types.SimpleNamespace(allocated=0, collections=0, emptied=0)
    total = 64 << 30
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: types.SimpleNamespace(total_memory=total))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: state.allocated)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: setattr(state, "emptied", state.emptied + 1))
    monkeypatch.setattr(worker.gc, "collect", lambda *a: setattr(state, "collections", state.collections + 1))
    state.total = total
    return state


def test_a_gpu_that_freed_the_case_skips_the_collection_but_returns_its_cache(fake_gpu):
    fake_gpu.allocated = 300 << 20  # what refcounting left: compile caches, workspaces
    assert worker.release_memory("cuda") is False
    assert (fake_gpu.collections, fake_gpu.emptied) == (0, 1)


def test_a_gpu_still_holding_a_share_of_its_memory_is_collected(fake_gpu):
    fake_gpu.allocated = int(fake_gpu.total * worker.COLLECT_ABOVE_SHARE) + 1  # a cycle held the last case
    assert worker.release_memory("cuda") is True
    assert (fake_gpu.collections, fake_gpu.emptied) == (1, 1)


def test_after_an_out_of_memory_and_on_the_cpu_it_always_collects(fake_gpu):
    assert worker.release_memory("cuda", force=True) is True
    assert worker.release_memory("cpu") is True
    assert fake_gpu.collections == 2 and fake_gpu.emptied == 1  # the CPU has no CUDA cache to return


def test_a_cycle_holding_a_tensor_is_freed_by_the_collection_it_triggers():
    # The reason the collection exists: refcounting alone never frees a tensor held in a cycle.
    import gc
    import weakref

    class Holder:
        pass

    gc.disable()  # no automatic collection between making the cycle and the release
    holder = Holder()
    holder.self = holder
    holder.tensor = torch.ones(1024)
    alive = weakref.ref(holder.tensor)
    del holder
    try:
        assert alive() is not None
        worker.release_memory("cpu")
        assert alive() is None
    finally:
        gc.enable()
