import pytest
import torch
from kernel_checks import assert_variant_matches_reference

from rooflint.core.errors import UserError
from rooflint.core.family import Cost
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check


def kv(op, num_blocks, seqs, pages, heads, head_dim):
    return {
        "op": op,
        "num_blocks": num_blocks,
        "seqs": seqs,
        "pages_per_seq": pages,
        "heads": heads,
        "head_dim": head_dim,
    }


# One block of one element; odd rows (15 elements: no 16-byte vector) in a pool with free blocks;
# 256-element rows over 16 pages.
SHAPES = [(1, 1, 1, 1, 1), (11, 3, 3, 3, 5), (40, 2, 8, 4, 64)]


@pytest.mark.parametrize("variant", ["triton", "eager", "plain_copy"])
@pytest.mark.parametrize("op", ["append", "read"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_variant_matches_reference(variant, op, shape, dtype):
    assert_variant_matches_reference("kv_cache", variant, kv(op, *shape), dtype)


def test_triton_append_touches_only_its_slots():
    family = get_family("kv_cache")
    params = kv("append", 11, 3, 3, 3, 5)
    case = family.build_case("custom", params, "bf16", torch.device("cpu"))
    k_pool, v_pool = family.variants["triton"].build(case)()
    used = case["block_table"].flatten().long()
    free = torch.ones(11, dtype=torch.bool)
    free[used] = False
    assert free.sum() == 2
    assert torch.equal(k_pool[free], case["k_pool"][free]) and torch.equal(v_pool[free], case["v_pool"][free])
    # The written pages hold the new tokens in order: page j of sequence s is tokens (s*3 + j)*16 ...
    assert torch.equal(k_pool[used].flatten(0, 1), case["k_new"]) and torch.equal(
        v_pool[used].flatten(0, 1), case["v_new"]
    )


def test_check_fails_an_append_that_writes_nothing():
    family = get_family("kv_cache")
    params = kv("append", 40, 2, 8, 4, 64)
    case = family.build_case("custom", params, "fp16", torch.device("cpu"))
    ref = family.reference(case.inputs, params)
    assert not check(family, "fp16", (case["k_pool"], case["v_pool"]), ref).passed


def test_check_fails_a_read_in_the_wrong_page_order():
    family = get_family("kv_cache")
    params = kv("read", 40, 2, 8, 4, 64)
    case = family.build_case("custom", params, "fp32", torch.device("cpu"))
    ref = family.reference(case.inputs, params)
    table = case["block_table"].long().sort(dim=1).values  # the same pages, physical order
    shape = (2, 8 * 16, 4, 64)
    assert not check(family, "fp32", (case["k_pool"][table].view(shape), case["v_pool"][table].view(shape)), ref).passed


def test_block_table_scatters_distinct_blocks():
    family = get_family("kv_cache")
    case = family.build_case("custom", kv("read", 64, 4, 8, 1, 1), "fp32", torch.device("cpu"))
    blocks = case["block_table"].flatten()
    assert blocks.dtype == torch.int32 and blocks.unique().numel() == 32
    assert not torch.equal(blocks, blocks.sort().values)  # a permutation, not the identity


def test_cost_counts_only_bytes_moved():
    family = get_family("kv_cache")
    tokens, row = 3 * 5 * 16, 2 * 8
    append = family.cost(kv("append", 20, 3, 5, 2, 8), "bf16")
    assert append == Cost(bytes=2 * (2 * tokens * row * 2) + tokens * 8)  # K, V in and out; int64 slots
    read = family.cost(kv("read", 20, 3, 5, 2, 8), "fp32")
    assert read == Cost(bytes=2 * (2 * tokens * row * 4) + 15 * 4)  # K, V in and out; int32 table
    assert read.flops == 0


def test_large_is_8192_pages_of_16_by_32_by_128():
    for params in get_family("kv_cache").sizes["large"]:
        assert params["seqs"] * params["pages_per_seq"] == 8192 and params["num_blocks"] == 16384
        assert get_family("kv_cache").cost(params, "bf16").bytes >= 4 * 8192 * 16 * 32 * 128 * 2


def test_too_many_pages_for_the_pool_is_a_clear_error():
    with pytest.raises(UserError, match="num_blocks"):
        get_family("kv_cache").cost(kv("read", 4, 2, 3, 1, 1), "fp32")
