"""kv_cache: a paged KV-cache in the vLLM (flash) layout, append and read, as one family.

A pool is [num_blocks, BLOCK_SIZE=16, heads, head_dim] for K and one for V; block_table[seq, page]
names the physical block holding a sequence's logical page. Each sequence here holds
pages_per_seq full pages, on blocks drawn by a random permutation, so its pages are scattered.

The ``op`` size parameter picks the operation, so rows read "kv_cache ... op=append" and
"kv_cache ... op=read" and every variant name (eager, triton, cuda) means the same thing for both:
- append: scatter new tokens' K and V rows [tokens, heads, head_dim] into their slots
  (slot = block * 16 + offset, vLLM's slot_mapping), in place in the pools;
- read: gather each sequence's pages into contiguous K and V [seqs, pages_per_seq * 16, heads, head_dim].

Both are pure data movement: 0 FLOPs, each moved byte read once and written once.
"""

from __future__ import annotations

import torch

from rooflint.core.errors import UserError
from rooflint.core.family import Cost, Family, element_size, randn

BLOCK_SIZE = 16  # tokens per page, vLLM's default


OPS = ("append", "read")


def _dims(params):
    op = params["op"]
    if op not in OPS:
        raise UserError(f"kv_cache op must be one of {', '.join(OPS)}, not {op!r}")
    pages = params["seqs"] * params["pages_per_seq"]
    if pages > params["num_blocks"]:
        raise UserError(f"kv_cache needs seqs * pages_per_seq ({pages}) <= num_blocks ({params['num_blocks']})")
    return op, params["num_blocks"], pages * BLOCK_SIZE, params["heads"] * params["head_dim"]


def make_inputs(params, dtype, device, generator):
    op, num_blocks, tokens, _ = _dims(params)
    seqs, pages, heads, head_dim = params["seqs"], params["pages_per_seq"], params["heads"], params["head_dim"]
    pool_shape = [num_blocks, BLOCK_SIZE, heads, head_dim]
    # Random (never zero) pools: a kernel that misses a slot leaves old random data that fails the check.
    inputs = {
        "k_pool": randn(pool_shape, dtype, device, generator),
        "v_pool": randn(pool_shape, dtype, device, generator),
    }
    blocks = torch.randperm(num_blocks, generator=generator, device=device)[: seqs * pages]
    inputs["block_table"] = blocks.view(seqs, pages).to(torch.int32)  # int32, as vLLM stores it
    if op == "append":
        offsets = torch.arange(BLOCK_SIZE, device=device)
        inputs["slots"] = (blocks[:, None] * BLOCK_SIZE + offsets).reshape(-1)  # int64, one per token
        inputs["k_new"] = randn([tokens, heads, head_dim], dtype, device, generator)
        inputs["v_new"] = randn([tokens, heads, head_dim], dtype, device, generator)
    return inputs


def reference(inputs, params):
    if params["op"] == "append":
        # The pools are outputs too, but comparing them whole would mean two 8.6 GB float64 copies at the
        # large size; the written rows are what append defines. The slots ride along for _compare.
        return inputs["slots"], inputs["k_new"].double(), inputs["v_new"].double()
    shape = _read_shape(params)
    table = inputs["block_table"].long()
    return inputs["k_pool"][table].double().view(shape), inputs["v_pool"][table].double().view(shape)


def _read_shape(params):
    return params["seqs"], params["pages_per_seq"] * BLOCK_SIZE, params["heads"], params["head_dim"]


def _compare(output, reference):
    if len(reference) == 2:  # read: contiguous outputs against the gathered pages
        return output, reference
    slots, k_ref, v_ref = reference

    # append variants return the pools (their rows at the slots are compared); plain_copy returns
    # the rows it wrote contiguously.
    def written(t):
        return t if t.dim() == 3 else t.flatten(0, 1)[slots]

    return tuple(written(t) for t in output), (k_ref, v_ref)


def cost(params, dtype):
    op, _, tokens, row = _dims(params)
    size = element_size(dtype)
    moved = 2 * tokens * row * size  # K and V rows of every token
    if op == "append":
        index = tokens * 8  # read slot_mapping, one int64 per token
    else:
        index = tokens // BLOCK_SIZE * 4  # read block_table, one int32 per page
    return Cost(
        bytes=moved  # read: the new rows (append) or the pool pages (read)
        + moved  # write: into the pool slots (append) or the contiguous outputs (read)
        + index,  # read the index: slot_mapping (append) or block_table (read)
    )


def _small(op):
    return {"op": op, "num_blocks": 64, "seqs": 2, "pages_per_seq": 8, "heads": 4, "head_dim": 64}


def _large(op):
    # 8192 pages of [16, 32, 128] bf16 (128 KiB each): 1 GiB of K plus 1 GiB of V moved each way,
    # from or into pools of 16384 blocks (2 GiB each); 80x the H100's 50 MB L2.
    return {"op": op, "num_blocks": 16384, "seqs": 64, "pages_per_seq": 128, "heads": 32, "head_dim": 128}


FAMILY = Family(
    "kv_cache",
    summary="paged KV-cache (vLLM layout, block_size 16): append scatters tokens, read gathers pages",
    sizes={"small": [_small("append"), _small("read")], "large": [_large("append"), _large("read")]},
    make_inputs=make_inputs,
    reference=reference,
    cost=cost,
    compare=_compare,
    # Pure copies: any correct kernel is bit-exact, so even fp16/bf16 must match to the last bit.
    tolerances={"fp32": 0.0, "fp16": 0.0, "bf16": 0.0},
)


def _own_pools(case):
    # Each append variant writes into its own copy of the pools: on a shared pool an earlier
    # variant's correct writes would hide a later one that writes nothing.
    return case["k_pool"].clone(), case["v_pool"].clone()


def _nan_like(t, shape=None):
    # Outputs start as NaN, so a row a kernel never writes fails the check instead of passing on
    # whatever the caching allocator handed back.
    return torch.full(shape or t.shape, float("nan"), dtype=t.dtype, device=t.device)


@FAMILY.variant("eager", baseline=True)
def eager(case):
    """PyTorch indexing: index_copy_ into the pools (append), pool[block_table] (read)"""
    if case.params["op"] == "append":
        k_pool, v_pool = _own_pools(case)
        slots, k_new, v_new = case["slots"], case["k_new"], case["v_new"]

        def append():
            k_pool.flatten(0, 1).index_copy_(0, slots, k_new)
            v_pool.flatten(0, 1).index_copy_(0, slots, v_new)
            return k_pool, v_pool

        return append
    k_pool, v_pool, table, shape = case["k_pool"], case["v_pool"], case["block_table"], _read_shape(case.params)
    return lambda: (k_pool[table].view(shape), v_pool[table].view(shape))


@FAMILY.variant("plain_copy", kind="eager")
def plain_copy(case):
    """reference point, not an implementation: contiguous copy of the same bytes, no indirection"""
    if case.params["op"] == "append":
        src_k, src_v = case["k_new"], case["v_new"]
    else:
        # The gather is done here, untimed, so the timed call is a straight copy of the same bytes.
        shape, table = _read_shape(case.params), case["block_table"]
        src_k, src_v = case["k_pool"][table].view(shape), case["v_pool"][table].view(shape)
    dst_k, dst_v = _nan_like(src_k), _nan_like(src_v)
    return lambda: (dst_k.copy_(src_k), dst_v.copy_(src_v))


def _operands(case):
    """(k_src, v_src, k_dst, v_dst, index, result) for the case's op, outputs preallocated."""
    if case.params["op"] == "append":
        k_pool, v_pool = _own_pools(case)
        return case["k_new"], case["v_new"], k_pool, v_pool, case["slots"], (k_pool, v_pool)
    shape = _read_shape(case.params)
    k_out, v_out = _nan_like(case["k_pool"], shape), _nan_like(case["v_pool"], shape)
    return case["k_pool"], case["v_pool"], k_out, v_out, case["block_table"], (k_out, v_out)


# The implementations register their variants on FAMILY as they are imported.
from rooflint.kernels.kv_cache import cuda, triton  # noqa: E402, F401
