"""kv_cache: cuda implementation."""

from __future__ import annotations

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype
from rooflint.kernels.kv_cache import BLOCK_SIZE, FAMILY, _dims, _operands

KV_CACHE_CU = cuda_build.family_source(__file__, "kv_cache")


@FAMILY.variant("cuda", needs=(NEEDS_CUDA, NEEDS_NVCC), sources=(KV_CACHE_CU,))
def cuda_variant(case):
    """CUDA C++ for K and V, a block per token row, 16-byte vectors"""
    library = cuda_build.load(KV_CACHE_CU)
    _, _, tokens, row = _dims(case.params)
    k_src, v_src, k_dst, v_dst, index, result = _operands(case)
    scatter = case.params["op"] == "append"

    def run():
        cuda_kv_copy(library, k_src, v_src, k_dst, v_dst, index, tokens, row, scatter)
        return result

    return run


def cuda_kv_copy(library, k_src, v_src, k_dst, v_dst, index, rows: int, row_elems: int, scatter: bool) -> None:
    """scatter: row i of k_src/v_src goes to row index[i] of the pools (append); else the pools' rows
    index[i] are gathered into k_dst/v_dst (read). Rows of row_elems elements, 16-byte vectors."""
    library.launch(
        "rooflint_kv_copy", k_src, v_src, k_dst, v_dst, index, rows, row_elems, int(scatter), BLOCK_SIZE,
        cuda_dtype(k_src.dtype),
    )  # fmt: skip
