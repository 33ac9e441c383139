"""kv_cache: triton implementation."""

from __future__ import annotations

from rooflint.core.family import NEEDS_CUDA, NEEDS_TRITON
from rooflint.core.triton_compat import tl, triton
from rooflint.kernels.kv_cache import BLOCK_SIZE, FAMILY, _dims, _operands


@triton.jit
def _kv_copy_kernel(k_src, v_src, k_dst, v_dst, index_ptr, row_elems, SCATTER: tl.constexpr, PAGE: tl.constexpr,
                    BLOCK: tl.constexpr):  # fmt: skip
    # One program per (token row, column block). The row's mapping is one scalar load; the rest
    # is a straight 16-byte-vectorised copy of K's and V's rows, both in flight together.
    row = tl.program_id(0).to(tl.int64)
    if SCATTER:  # append: new row -> slot
        src_row = row
        dst_row = tl.load(index_ptr + row)
    else:  # read: output row -> block_table[page] * PAGE + offset in page
        src_row = tl.load(index_ptr + row // PAGE).to(tl.int64) * PAGE + row % PAGE
        dst_row = row
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < row_elems
    k = tl.load(k_src + src_row * row_elems + cols, mask=mask)
    v = tl.load(v_src + src_row * row_elems + cols, mask=mask)
    tl.store(k_dst + dst_row * row_elems + cols, k, mask=mask)
    tl.store(v_dst + dst_row * row_elems + cols, v, mask=mask)


def triton_kv_copy(k_src, v_src, k_dst, v_dst, index, rows, row_elems, scatter: bool, block=4096, num_warps=None):
    # A 4096-element (8 KB bf16) row per program: 8 warps move 16 bytes per thread twice, for K and V.
    block = min(block, triton.next_power_of_2(row_elems))
    num_warps = num_warps or (8 if block >= 2048 else 4)
    grid = (rows, triton.cdiv(row_elems, block))
    _kv_copy_kernel[grid](k_src, v_src, k_dst, v_dst, index, row_elems, SCATTER=scatter, PAGE=BLOCK_SIZE, BLOCK=block,
                          num_warps=num_warps)  # fmt: skip


@FAMILY.variant("triton", needs=(NEEDS_CUDA, NEEDS_TRITON))
def triton_variant(case):
    """one Triton kernel for K and V, a program per token row"""
    _, _, tokens, row = _dims(case.params)
    k_src, v_src, k_dst, v_dst, index, result = _operands(case)
    scatter = case.params["op"] == "append"

    def run():
        triton_kv_copy(k_src, v_src, k_dst, v_dst, index, tokens, row, scatter)
        return result

    return run
