import pytest
import torch
from kernel_checks import assert_variant_matches_reference

from rooflint.core.family import Cost
from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels import layernorm_backward as lnb
from rooflint.kernels.layernorm_backward.cuda import cuda_layernorm_backward
from rooflint.kernels.layernorm_backward.triton import SHARED_RESERVE, rows_stages, triton_layernorm_backward

SHAPES = [(1, 1), (3, 1000), (70, 1), (70, 1000), (5, 4097)]


def assert_triton_launch_matches_autograd(rows, hidden, dtype, **launch):
    """triton_layernorm_backward with explicit launch choices (programs, max_block) against float64."""
    family = get_family("layernorm_backward")
    params = {"rows": rows, "hidden": hidden}
    case = family.build_case("custom", params, dtype, torch.device("cpu"))
    args = case["x"], case["dy"], case["weight"], case["mean"], case["rstd"]
    output = triton_layernorm_backward(*args, **launch)
    verdict = check(family, dtype, output, family.reference(case.inputs, params))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("rows,hidden", SHAPES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_triton_matches_autograd(rows, hidden, dtype):
    assert_variant_matches_reference("layernorm_backward", "triton", {"rows": rows, "hidden": hidden}, dtype)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_triton_wide_rows_path_matches_autograd(dtype):
    # A block cap of 1024 sends 2049 columns through the two-pass, column-chunked kernels: two whole
    # chunks and a one-column tail.
    assert_triton_launch_matches_autograd(9, 2049, dtype, programs=4, max_block=1024)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_triton_with_fewer_programs_than_rows_matches_autograd(dtype):
    assert_triton_launch_matches_autograd(37, 1000, dtype, programs=5)  # each program strides over ~7 rows


def test_many_programs_and_few_rows_agree():
    # More programs than rows leaves some partial rows empty; they must still be written as zeros.
    family = get_family("layernorm_backward")
    case = family.build_case("custom", {"rows": 3, "hidden": 1000}, "fp32", torch.device("cpu"))
    args = case["x"], case["dy"], case["weight"], case["mean"], case["rstd"]
    one = triton_layernorm_backward(*args, programs=1)
    out = lnb.allocate(case["x"], case["weight"], 3)
    out[3].fill_(float("nan"))
    three = triton_layernorm_backward(*args, out=out)
    for a, b in zip(one, three):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["eager", "eager_unfused"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_torch_variants_match_autograd(variant, dtype):
    assert_variant_matches_reference("layernorm_backward", variant, {"rows": 70, "hidden": 1000}, dtype)


@pytest.mark.parametrize("variant", ["compile_unfused", "compile_builtin"])
def test_compile_forms_match_autograd(variant):
    assert_variant_matches_reference("layernorm_backward", variant, {"rows": 4, "hidden": 8}, "fp32")


def test_tolerance_catches_a_dropped_partial_row():
    # Losing one program's partial sums is the failure a two-stage reduction invites: it must fail.
    family = get_family("layernorm_backward")
    params = {"rows": 64, "hidden": 1000}
    case = family.build_case("custom", params, "bf16", torch.device("cpu"))
    args = case["x"], case["dy"], case["weight"], case["mean"], case["rstd"]
    dx, dweight, dbias = lnb.unfused(*args)
    dropped = (case["dy"][1::2].float().sum(0)).to(torch.bfloat16)  # every other row's dbias only
    assert not check(family, "bf16", (dx, dweight, dropped), family.reference(case.inputs, params)).passed


def test_cost_counts():
    rows, hidden = 16384, 4096
    cost = get_family("layernorm_backward").cost({"rows": rows, "hidden": hidden}, "bf16")
    # x, dy, dx: 2 bytes each; weight, dweight, dbias: 2 bytes each; fp32 mean and rstd.
    assert cost == Cost(
        cuda_flops=13 * rows * hidden + 2 * rows, bytes=3 * 2 * rows * hidden + 3 * 2 * hidden + 8 * rows
    )
    assert get_family("layernorm_backward").cost({"rows": 2, "hidden": 3}, "fp32").bytes == 3 * 4 * 6 + 3 * 4 * 3 + 16


def test_modeled_bytes():
    family = get_family("layernorm_backward")
    params = {"rows": 10, "hidden": 100}
    ideal = family.cost(params, "bf16").bytes
    assert family.variants["eager"].modeled_bytes(params, "bf16") == ideal + 2 * 1000 * 2
    # 9 full-size fp32 elementwise ops and 4 reductions, plus three bf16<->fp32 casts of 6 bytes each.
    assert family.variants["eager_unfused"].modeled_bytes(params, "bf16") == 1000 * (100 + 18)
    assert family.variants["eager_unfused"].modeled_bytes(params, "fp32") == 1000 * 100
    # 10 rows: at most 10 programs, each writing and the sum kernel reading two fp32 rows of 100.
    assert family.variants["triton"].modeled_bytes(params, "bf16") == ideal + 2 * 2 * 10 * 100 * 4


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_partial_sums_over_more_than_one_step_match_autograd(dtype):
    # 600 partial rows: the partial-sum kernel adds them in two steps of 512, and 17 columns leave
    # its second 16-column block one column wide.
    assert_triton_launch_matches_autograd(600, 17, dtype, programs=600)


def test_rows_stages_fit_every_program_in_shared_memory():
    hopper, ampere, turing = 233472, 167936, 65536  # shared memory per SM: H100/H200, A100, T4
    assert rows_stages(4096, 2, 2, hopper) == 4  # 3 row buffers of 16 KB per program
    assert rows_stages(8192, 2, 2, ampere) == 3  # 2 of 32 KB
    assert rows_stages(4096, 2, 2, turing) == 1  # room for one buffer, which would overlap nothing
    assert rows_stages(4096, 4, 2, hopper) == 1  # fp32: the pipelined kernel needs too many registers
    for shared in (hopper, ampere, turing):
        for block in (256, 1024, 4096, 8192):
            for per_sm in (1, 2, 4):
                stages = rows_stages(block, 2, per_sm, shared)
                assert stages in (1, 3, 4)
                assert stages == 1 or per_sm * ((stages - 1) * 2 * block * 2 + SHARED_RESERVE) <= shared


# Odd shapes through every path of the fused variants, on a GPU (pytest -m gpu with
# TRITON_INTERPRET=0): rows of 1 element, scalar rows (widths no 16-byte vector divides), each
# register plan of the CUDA kernel (1 to 8 vectors a thread), the Triton pipeline, more blocks than
# rows, and the wide two-pass kernels. The partial rows start as NaN: every one the sum reads must be written.
GPU_SHAPES = [
    (1, 1), (300, 1), (5, 300), (3, 1000), (257, 1001), (100, 2047), (30, 2048), (5000, 64), (40, 4096), (77, 4097),
    (64, 8192), (33, 20000),
]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("variant", ["triton", "cuda"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_gpu_fused_variants_match_autograd_on_odd_shapes(variant, dtype):
    family = get_family("layernorm_backward")
    device = torch.device("cuda")
    failures = []
    for rows, hidden in GPU_SHAPES:
        params = {"rows": rows, "hidden": hidden}
        case = family.build_case("custom", params, dtype, device)
        args = case["x"], case["dy"], case["weight"], case["mean"], case["rstd"]
        # The variants' own scratch: Triton's programs, or room for CUDA's resident blocks.
        per_sm = lnb.TRITON_PROGRAMS_PER_SM if variant == "triton" else lnb.CUDA_PROGRAMS_PER_SM
        programs = lnb.num_programs(rows, device, per_sm)
        out = lnb.allocate(case["x"], case["weight"], programs)
        out[3].fill_(float("nan"))
        run = triton_layernorm_backward if variant == "triton" else cuda_layernorm_backward
        output = run(*args, out=out)
        verdict = check(family, dtype, output, family.reference(case.inputs, params))
        if not verdict.passed:
            failures.append(f"{rows}x{hidden}: {verdict.message}")
    assert not failures, "\n".join(failures)
