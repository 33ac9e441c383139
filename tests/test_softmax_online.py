"""The cuda_online softmax's CPU side: its registration, its ctypes calls against softmax_online.cu's
extern "C" signatures, and its routing of rows too wide for the shared-memory stage. The kernel
itself runs in tests/gpu/test_softmax_online_gpu.py."""

import re

import pytest
import torch
from test_cuda_launch_contracts import KERNELS, RecordingLibrary, assert_matches, kind_of

from rooflint.core.family import NEEDS_CUDA, NEEDS_NVCC
from rooflint.core.registry import get_family
from rooflint.kernels.softmax import cuda_online


class QueryingLibrary(RecordingLibrary):
    """Records launches and host queries; every query answers ``answer``."""

    def __init__(self, answer):
        super().__init__()
        self.answer, self.queries = answer, []

    def query(self, function, *args):
        self.queries.append((function, args))
        return self.answer


def query_signature(function: str) -> list[str]:
    """The C parameter types of a host query (no stream) in softmax_online.cu."""
    text = (KERNELS / "softmax" / "softmax_online.cu").read_text()
    match = re.search(rf'extern "C" int {function}\((.*?)\)\s*{{', text, re.S)
    assert match, f"{function} not found in softmax_online.cu"
    return [p.strip().rsplit(" ", 1)[0].replace(" ", "") for p in match.group(1).split(",")]


def test_cuda_online_is_a_cuda_variant_with_the_cuda_needs_in_every_float_dtype():
    family = get_family("softmax")
    variant = family.variants["cuda_online"]
    assert variant.kind == "cuda"
    assert set(variant.needs) == {NEEDS_CUDA, NEEDS_NVCC} == set(family.variants["cuda"].needs)
    assert variant.dtypes is None and set(family.dtypes) == {"fp32", "fp16", "bf16"}  # none left out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_launch_matches_its_extern_c_signature(dtype):
    x = torch.zeros(3, 7, dtype=dtype)
    library = RecordingLibrary()
    cuda_online.cuda_softmax_online(library, x, torch.empty_like(x), threads=64)
    assert_matches(library, "softmax_online.cu")
    function, args = library.calls[0]
    assert function == "rooflint_softmax_online"
    assert args[2:] == (3, 7, {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}[dtype], 64)


@pytest.mark.parametrize(
    ("ask", "function"),
    [
        (lambda lib: cuda_online.widest_staged_row(lib, torch.bfloat16), "rooflint_softmax_online_max_cols"),
        (lambda lib: cuda_online.rows_per_sm(lib, 16384, torch.bfloat16), "rooflint_softmax_online_rows_per_sm"),
    ],
)
def test_each_host_query_matches_its_extern_c_signature(ask, function):
    library = QueryingLibrary(answer=6)
    assert ask(library) == 6
    ((called, args),) = library.queries
    assert called == function
    params = query_signature(function)
    assert len(args) == len(params)
    assert all(isinstance(arg, kind_of(c_type)) for arg, c_type in zip(args, params, strict=True))


def test_the_launch_refuses_a_strided_tensor():
    x = torch.zeros(8, 4).t()
    with pytest.raises(ValueError, match="contiguous"):
        cuda_online.cuda_softmax_online(RecordingLibrary(), x, torch.empty(4, 8))


@pytest.mark.parametrize(("widest", "staged"), [(1000, True), (999, False)])
def test_rows_past_the_widest_stage_take_the_looped_kernel(monkeypatch, widest, staged):
    family = get_family("softmax")
    case = family.build_case("custom", {"rows": 2, "cols": 1000}, "bf16", torch.device("cpu"))
    library, looped = QueryingLibrary(answer=widest), []
    monkeypatch.setattr(cuda_online, "load_library", lambda: library)
    monkeypatch.setattr(cuda_online, "cuda_softmax", lambda x, out, mode: looped.append(mode) or out)
    family.variants["cuda_online"].build(case)()
    assert [name for name, _ in library.calls] == (["rooflint_softmax_online"] if staged else [])
    assert looped == ([] if staged else ["looped"])


def test_bench_builds_both_sources_ahead_the_staged_kernel_and_the_looped_fallback():
    from rooflint.engine.build_ahead import sources_for

    names = [path.name for path in sources_for([("softmax", "cuda_online")])]
    assert names == ["softmax_online.cu", "softmax.cu"]
