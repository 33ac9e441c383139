"""The float64 reference cache: hits on a second run, misses on any change of what decides a
reference's value, and a corrupt file is a miss, never an error."""

import math

import pytest
import torch

from rooflint.core.family import Cost, Family, randn
from rooflint.core.registry import get_family
from rooflint.core.specs import get_spec
from rooflint.engine.reference_cache import ReferenceCache, code_fingerprint, reference_key
from rooflint.engine.settings import MeasureSettings
from rooflint.engine.worker import Task, Worker

SCALE = 2.0


def make_inputs(params, dtype, device, generator):
    return {"x": randn([params["n"]], dtype, device, generator)}


def scaled(x):
    return x.double() * SCALE


def reference(inputs, params):
    return scaled(inputs["x"])


def other_reference(inputs, params):
    return inputs["x"].double() * 3


def _family(ref=reference):
    return Family(
        "cached_toy",
        summary="y = 2x",
        sizes={"small": [{"n": 64}], "large": [{"n": 128}]},
        make_inputs=make_inputs,
        reference=ref,
        cost=lambda params, dtype: Cost(cuda_flops=params["n"], bytes=8 * params["n"]),
        dtypes=("fp32", "bf16"),
    )


def _key(family=None, params=None, dtype="fp32", seed=0):
    return reference_key(family or _family(), params or {"n": 64}, dtype, seed, "cpu")


def fast_timer(fn, **_):
    from rooflint.engine.timing import summarize

    fn()
    return summarize([1.0, 1.0, 1.0], "cpu_wall", False)


def _worker(cache):
    return Worker("cpu", get_spec("h100_sxm"), MeasureSettings(), timer=fast_timer, reference_cache=cache)


def test_a_second_worker_reads_the_reference_the_first_one_stored(tmp_path):
    cache = ReferenceCache(tmp_path, read_bytes_per_s=math.inf)  # store every reference, however cheap
    task = Task("vector_add", "eager", "fp32", "custom", {"n": 1024})
    first = _worker(cache)
    assert first.run(task).status == "ok"
    assert first.clock.take()["counts"] == {"reference_misses": 1}
    second = _worker(cache)
    assert second.run(task).status == "ok"
    assert second.clock.take()["counts"] == {"reference_hits": 1}
    # The reference read back is the one computed: same value, bit for bit.
    assert torch.equal(second._reference, first._reference)
    # Without a cache every reference is computed and nothing is counted or written.
    uncached = _worker(None)
    assert uncached.run(task).status == "ok" and uncached.clock.take()["counts"] == {}
    assert len(list(tmp_path.glob("*.pt"))) == 1


def test_a_reference_cheaper_to_compute_than_to_read_is_not_stored(tmp_path):
    cache = ReferenceCache(tmp_path, read_bytes_per_s=1.0)  # a 1 byte/s disk: never worth it
    worker = _worker(cache)
    assert worker.run(Task("vector_add", "eager", "fp32", "custom", {"n": 1024})).status == "ok"
    assert worker.clock.take()["counts"] == {"reference_recomputed": 1}
    assert list(tmp_path.iterdir()) == []


def test_the_key_changes_with_shape_dtype_seed_device_and_reference_code(monkeypatch):
    base = _key()
    assert _key() == base  # the same inputs give the same key
    assert _key(params={"n": 65}) != base
    assert _key(dtype="bf16") != base
    assert _key(seed=1) != base
    assert reference_key(_family(), {"n": 64}, "fp32", 0, "meta") != base
    assert _key(family=_family(other_reference)) != base
    # A helper the reference calls, and a constant it reads, are part of its code.
    monkeypatch.setitem(globals(), "SCALE", 2.5)
    assert _key() != base
    monkeypatch.setitem(globals(), "SCALE", 2.0)
    assert _key() == base
    monkeypatch.setitem(globals(), "scaled", lambda x: x.double() * 2.0)
    assert _key() != base


def test_the_fingerprint_follows_helpers_in_other_modules():
    # layernorm's reference calls reference_normalized: both are hashed, and its inputs' code too.
    layernorm = get_family("layernorm")
    alone = code_fingerprint(layernorm.reference)
    assert code_fingerprint(layernorm.reference, layernorm.make_inputs) != alone


@pytest.mark.parametrize("damage", [b"not a torch file", None])
def test_a_corrupt_or_partial_file_is_a_miss_and_is_removed(tmp_path, damage):
    cache = ReferenceCache(tmp_path)
    key = _key()
    assert cache.store(key, (torch.arange(100, dtype=torch.float64), torch.ones(3, dtype=torch.float64)))
    path = cache.path(key)
    whole = path.read_bytes()
    path.write_bytes(damage if damage is not None else whole[: len(whole) // 2])  # None: cut short
    assert cache.load(key, "cpu") is None
    assert not path.exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # and no temporary file left behind


def test_a_stored_tuple_comes_back_whole(tmp_path):
    cache = ReferenceCache(tmp_path)
    value = (torch.randn(5, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64))
    assert cache.store("k", value)
    loaded = cache.load("k", "cpu")
    assert isinstance(loaded, tuple) and all(torch.equal(a, b) for a, b in zip(loaded, value))
    assert [p.name for p in tmp_path.iterdir()] == ["k.pt"]
