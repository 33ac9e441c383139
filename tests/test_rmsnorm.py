"""rmsnorm: the Triton kernel in the interpreter against float64 over odd shapes and every dtype, the
PyTorch forms, the cost model, and the library adapters against fakes with the libraries' signatures."""

from __future__ import annotations

import pytest
import torch
from fake_libraries import install
from kernel_checks import assert_variant_matches_reference

from rooflint.core.registry import get_family
from rooflint.engine.correctness import check
from rooflint.kernels.rmsnorm import triton as rms_triton

# hidden 1 (y = w * x/|x|), odd widths, 256 (a whole tile), 4097 (just past a power of two) and 20001
# (wider than one register tile: the looped path).
SHAPES = [(3, 1), (5, 7), (6, 256), (4, 1000), (3, 4097), (2, 20_001)]


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("rows,hidden", SHAPES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_triton_matches_float64(rows, hidden, residual, dtype):
    params = {"rows": rows, "hidden": hidden, "residual": residual}
    assert_variant_matches_reference("rmsnorm", "triton", params, dtype)


@pytest.mark.parametrize(
    "config", [{"W_FIRST": 0, "EVICT": 1}, {"W_FIRST": 1, "EVICT": 1}, {"W_FIRST": 0, "num_warps": 2}]
)
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("rows,hidden", [(5, 7), (4, 1000), (3, 4097)])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_each_ab_config_matches_float64_and_the_default_bits(rows, hidden, residual, dtype, config):
    # `rooflint ab rmsnorm -V triton --config ...` runs these: w before or after the reduction and the
    # eviction hints move no arithmetic, so each gives the default's bits as well as float64's answer.
    family = get_family("rmsnorm")
    params = {"rows": rows, "hidden": hidden, "residual": residual}
    case = family.build_case("custom", params, dtype, torch.device("cpu"), seed=rows + hidden)
    run = family.variants["triton"].build(case, config={**rms_triton.ROW_CONFIG, **config})
    output = run()
    verdict = check(family, dtype, output, family.reference(case.inputs, params))
    assert verdict.passed, verdict.message
    default = family.variants["triton"].build(case)()
    for got, want in zip(output if residual else (output,), default if residual else (default,), strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_looped_path_matches_float64(residual, dtype):
    # A 256-wide tile sends 1000 columns through the looped path: 3 full tiles and a partial one,
    # and with the residual the second pass re-reads the h the first one wrote.
    family = get_family("rmsnorm")
    params = {"rows": 6, "hidden": 1000, "residual": residual}
    case = family.build_case("custom", params, dtype, torch.device("cpu"))
    x, w, r = case["x"], case["weight"], case.inputs.get("residual")
    y, h = torch.empty_like(x), torch.empty_like(x) if residual else None
    output = rms_triton.triton_rmsnorm(x, w, y, r, h, max_block=256)
    verdict = check(family, dtype, output, family.reference(case.inputs, params))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("variant", ["eager", "eager_unfused", "compile_unfused", "compile_builtin"])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_torch_variants_match_float64(variant, residual, dtype):
    assert_variant_matches_reference("rmsnorm", variant, {"rows": 33, "hidden": 1000, "residual": residual}, dtype)


def test_the_residual_output_is_the_sum_the_next_layer_reads():
    family = get_family("rmsnorm")
    params = {"rows": 4, "hidden": 64, "residual": True}
    case = family.build_case("custom", params, "fp32", torch.device("cpu"))
    _, h = family.variants["triton"].build(case)()
    assert torch.equal(h, case["x"] + case["residual"])


def test_cost_counts_each_tensor_once():
    cost = get_family("rmsnorm").cost
    plain = cost({"rows": 16384, "hidden": 4096, "residual": False}, "bf16")
    fused = cost({"rows": 16384, "hidden": 4096, "residual": True}, "bf16")
    n = 16384 * 4096
    assert plain.bytes == 2 * n * 2 + 4096 * 2  # read x, write y, read w
    assert fused.bytes == 4 * n * 2 + 4096 * 2  # and read the residual, write h
    assert fused.cuda_flops - plain.cuda_flops == n  # the add


# ----------------------------------------------------------------- adapters, against fake libraries


def _rmsnorm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def fake_liger(monkeypatch):
    def liger_rms_norm(X, W, eps, offset=0.0, casting_mode="llama", in_place=True):
        return _rmsnorm(X, W, eps)

    def liger_fused_add_rms_norm(X, R, W, eps, offset=0.0, casting_mode="llama", in_place=True):
        S = X + R
        return _rmsnorm(S, W, eps), S

    install(
        monkeypatch,
        "liger_kernel.transformers.functional",
        liger_rms_norm=liger_rms_norm,
        liger_fused_add_rms_norm=liger_fused_add_rms_norm,
    )


def fake_quack(monkeypatch):
    def rmsnorm_fwd(x, weight=None, bias=None, residual=None, out_dtype=None, residual_dtype=None, eps=1e-6,
                    store_rstd=False, weight_offset=0.0):  # fmt: skip
        h = x if residual is None else x + residual
        return _rmsnorm(h, weight, eps), h, None

    install(monkeypatch, "quack.rmsnorm", rmsnorm_fwd=rmsnorm_fwd)


def fake_flashinfer(monkeypatch):
    def rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
        return _rmsnorm(input, weight, eps)

    def fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
        residual += input  # in place, as FlashInfer documents it
        input.copy_(_rmsnorm(residual, weight, eps))

    install(monkeypatch, "flashinfer.norm", rmsnorm=rmsnorm, fused_add_rmsnorm=fused_add_rmsnorm)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize(
    ("variant", "install"), [("liger", fake_liger), ("quack", fake_quack), ("flashinfer", fake_flashinfer)]
)
def test_adapters_call_each_library_as_it_is_documented(monkeypatch, variant, install, residual):
    install(monkeypatch)
    family = get_family("rmsnorm")
    params = {"rows": 8, "hidden": 96, "residual": residual}
    case = family.build_case("custom", params, "bf16", torch.device("cpu"))
    before = {name: tensor.clone() for name, tensor in case.inputs.items()}
    call = family.variants[variant].build(case)
    first = call()
    call()  # the engine calls again (to measure memory) before it checks the first output
    verdict = check(family, "bf16", first, family.reference(case.inputs, params))
    assert verdict.passed, verdict.message
    for name, tensor in case.inputs.items():  # the inputs the other variants share are left alone
        assert torch.equal(tensor, before[name]), name
    assert family.variants[variant].library is not None and family.variants[variant].kind == "library"


def test_flashinfer_runs_16_bit_only():
    assert get_family("rmsnorm").variants["flashinfer"].dtypes == ("fp16", "bf16")


@pytest.mark.parametrize("residual", [False, True])
def test_the_cuda_launch_matches_its_extern_c_signature(residual):
    # ctypes checks nothing: held against rmsnorm.cu's parameter list (null pointers without the residual)
    from test_cuda_launch_contracts import RecordingLibrary, kind_of, signature

    from rooflint.kernels.rmsnorm.cuda import cuda_rmsnorm

    x = torch.zeros(4, 64, dtype=torch.bfloat16)
    library = RecordingLibrary()
    cuda_rmsnorm(library, x, x[0], x, x if residual else None, x if residual else None)
    ((function, args),) = library.calls
    params = signature("rmsnorm.cu", function)
    assert len(args) == len(params)
    for arg, c_type in zip(args, params, strict=True):
        want = kind_of(c_type)
        assert isinstance(arg, want) or (arg is None and want is torch.Tensor and not residual), (arg, c_type)
