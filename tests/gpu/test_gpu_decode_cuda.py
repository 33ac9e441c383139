"""GPU tier: both split kernels of the CUDA decode (decode_attention.cu), each forced in turn, against
float64 at every query-head group and head dim they are built for, at lengths that end inside a
16-row tile, over several split plans, and on the strided views a model passes (a fused QKV output's
q, a preallocated cache read in place). `auto` must pick the tensor-core kernel on sm_80+ (the
CUDA-core one is sm_75's); the family's small case covers only G = 2, D = 64.
"""

from __future__ import annotations

import pytest
import torch

from rooflint.engine import cuda_build
from rooflint.engine.correctness import check
from rooflint.kernels import decode_attention as da
from rooflint.kernels.decode_attention.cuda import CUDA_PATHS, cuda_decode, cuda_plan
from rooflint.kernels.decode_attention.plans import DecodeWorkspace, cache_layout, q_layout

pytestmark = pytest.mark.gpu

PATHS = ("cuda_cores", "tensor_cores")


@pytest.fixture(scope="module")
def library():
    return cuda_build.load(cuda_build.family_source(da.__file__))


def inputs(b, h, h_kv, c, d, dtype, capacity=None, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    params = {"b": b, "h": h, "h_kv": h_kv, "c": c, "d": d}
    case = da.make_inputs(params, dtype, torch.device("cuda"), generator)
    q, k, v = case["q"], case["k"], case["v"]
    if capacity:  # a cache allocated for `capacity` tokens of which the first c are read, in place
        big_k = torch.randn((b, h_kv, capacity, d), dtype=dtype, device="cuda", generator=generator)
        big_v = torch.randn((b, h_kv, capacity, d), dtype=dtype, device="cuda", generator=generator)
        big_k[:, :, :c], big_v[:, :, :c] = k, v
        k, v = big_k[:, :, :c], big_v[:, :, :c]
    return params, q, k, v


def run(library, q, k, v, path, plan=None):
    h_kv, c = k.shape[1], k.shape[2]
    ws = DecodeWorkspace(q, h_kv, c, plan=plan or cuda_plan(library, q, h_kv, c, path))
    out = cuda_decode(library, q, k, v, ws, path).clone()
    torch.cuda.synchronize()
    return out


def assert_matches_float64(out, params, q, k, v, dtype_name):
    reference = da.reference({"q": q, "k": k, "v": v}, params)
    verdict = check(da.FAMILY, dtype_name, out, reference)
    assert verdict.passed, f"{params}: relative error {verdict.error:.3g} > {verdict.tolerance:.3g}"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("group", [1, 2, 4, 8])
def test_each_split_kernel_matches_float64(library, group, d, dtype, path):
    name = "bf16" if dtype == torch.bfloat16 else "fp16"
    for c in (1, 15, 17, 300, 1000):  # one token, inside a first tile, one past it, ragged last tiles
        params, q, k, v = inputs(2, 2 * group, 2, c, d, dtype)
        assert_matches_float64(run(library, q, k, v, path), params, q, k, v, name)


@pytest.mark.parametrize("path", PATHS)
def test_each_split_kernel_matches_float64_over_split_plans(library, path):
    # 1 split (one block streams all 2,000 rows), splits of 64 rows (fewer rows than a block's
    # four warps take in one step of 16 each), and splits whose last one holds one token.
    params, q, k, v = inputs(3, 8, 2, 2000, 128, torch.bfloat16)
    for plan in ((1, 2000), (32, 64), (2, 1999), (7, 320)):
        assert_matches_float64(run(library, q, k, v, path, plan), params, q, k, v, "bf16")


@pytest.mark.parametrize("path", PATHS)
def test_each_split_kernel_reads_strided_views_in_place(library, path):
    # q as a slice of a fused QKV output (sequences 3 * H * D apart) and the cache as the first 777
    # rows of one allocated for 1,024: the kernels take the strides, not a copy.
    params, q, k, v = inputs(2, 8, 2, 777, 128, torch.bfloat16, capacity=1024)
    qkv = torch.randn((2, 1, 3 * 8 * 128), dtype=torch.bfloat16, device="cuda")
    qkv[:, :, : 8 * 128] = q.reshape(2, 1, 8 * 128)
    q_view = qkv[:, :, : 8 * 128].view(2, 1, 8, 128).transpose(1, 2)
    assert q_layout(q_view)[1] == 3 * 8 * 128 and cache_layout(k, v)[2] == 1024
    assert_matches_float64(run(library, q_view, k, v, path), params, q, k, v, "bf16")


def test_auto_picks_tensor_cores_on_sm80_and_up(library):
    # The occupancy query answers for the kernel that would run: auto agrees with the forced path.
    chosen = "tensor_cores" if torch.cuda.get_device_capability()[0] >= 8 else "cuda_cores"
    for group in (1, 4):
        auto = library.query("rooflint_decode_blocks_per_sm", 128, group, 2, CUDA_PATHS["auto"])
        assert auto == library.query("rooflint_decode_blocks_per_sm", 128, group, 2, CUDA_PATHS[chosen])
    # The two kernels hold different numbers of blocks an SM at G = 4, so the check above can fail.
    cores = library.query("rooflint_decode_blocks_per_sm", 128, 4, 2, CUDA_PATHS["cuda_cores"])
    if chosen == "tensor_cores":
        assert cores != library.query("rooflint_decode_blocks_per_sm", 128, 4, 2, CUDA_PATHS["tensor_cores"])
