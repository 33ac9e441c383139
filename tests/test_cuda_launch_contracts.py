"""The Python side of each CUDA launch matches its extern "C" signature: argument count and kinds.

ctypes checks nothing: a missing or swapped argument reaches the kernel as garbage. These tests
call the Python wrappers with a fake library that records the arguments, and hold them against
the parameter list parsed from the .cu source (pointers take tensors, long long takes ints, float
takes floats; the trailing cudaStream_t is the launcher's own).
"""

import re
from pathlib import Path

import pytest
import torch

import rooflint.kernels
from rooflint.kernels.attention.cuda import cuda_attention
from rooflint.kernels.decode_attention.cuda import cuda_decode
from rooflint.kernels.decode_attention.plans import DecodeWorkspace
from rooflint.kernels.kv_cache.cuda import cuda_kv_copy

KERNELS = Path(rooflint.kernels.__file__).parent


class RecordingLibrary:
    def __init__(self):
        self.calls = []

    def launch(self, function, *args):
        self.calls.append((function, args))


def signature(source: str, function: str) -> list[str]:
    """The C parameter types of ``function`` in kernels/<family>/<source>, without the stream."""
    (path,) = KERNELS.rglob(source)
    text = path.read_text()
    match = re.search(rf'extern "C" int {function}\((.*?)\)\s*{{', text, re.S)
    assert match, f"{function} not found in {source}"
    params = [p.strip() for p in match.group(1).split(",")]
    assert params[-1].startswith("cudaStream_t")
    return [p.rsplit(" ", 1)[0].replace(" ", "") for p in params[:-1]]


def kind_of(c_type: str) -> type:
    if c_type.endswith("*"):
        return torch.Tensor
    return {"longlong": int, "float": float}[c_type]


def assert_matches(library: RecordingLibrary, source: str):
    ((function, args),) = library.calls
    params = signature(source, function)
    assert len(args) == len(params), f"{function}: {len(args)} arguments for {len(params)} parameters"
    for index, (arg, c_type) in enumerate(zip(args, params, strict=True)):
        want = kind_of(c_type)
        got = int if isinstance(arg, bool) else type(arg)  # bools pass as long long
        assert isinstance(arg, want) or got is want, f"{function} argument {index}: {type(arg).__name__} for {c_type}"


def test_decode_attention_launch_passes_the_strides_of_a_view():
    b, h, d, capacity, length = 2, 4, 64, 48, 33
    qkv = torch.zeros(b, 1, 3, h, d, dtype=torch.bfloat16)
    q = qkv[:, :, 0].transpose(1, 2)
    cache = torch.zeros(b, h, capacity, d, dtype=torch.bfloat16)
    k = v = cache[:, :, :length]
    library = RecordingLibrary()
    ws = DecodeWorkspace(q, h, length)
    cuda_decode(library, q, k, v, ws)
    assert_matches(library, "decode_attention.cu")
    args = library.calls[0][1]
    assert args[0] is q and args[1] is k  # no copies: the kernel reads the views
    assert args[-3:] == (capacity, 3 * h * d, 0)  # kv_rows, q_batch_stride, the auto path


def test_attention_launch():
    q = torch.zeros(1, 2, 16, 64, dtype=torch.float16)
    library = RecordingLibrary()
    cuda_attention(library, q, q, q, True, torch.empty_like(q))
    assert_matches(library, "attention.cu")


@pytest.mark.parametrize("scatter", [True, False])
def test_kv_copy_launch(scatter):
    rows = torch.zeros(4, 8, dtype=torch.bfloat16)
    pool = torch.zeros(32, 8, dtype=torch.bfloat16)
    library = RecordingLibrary()
    cuda_kv_copy(library, rows, rows, pool, pool, torch.arange(4), 4, 8, scatter)
    assert_matches(library, "kv_cache.cu")
    assert library.calls[0][1][7] == int(scatter)


@pytest.mark.parametrize("append", [True, False])
def test_weight_only_qkv_rope_launch(monkeypatch, append):
    """codes_qkv_rope's arguments against rooflint_skinny_codes_rope: the rotary start is the token
    position, the append's start the K columns' first output, and its width K's columns."""
    from rooflint.engine import cuda_build
    from rooflint.kernels.gelu_linear.skinny import KVAppend
    from rooflint.kernels.weight_only_gemm import cuda

    library = RecordingLibrary()
    monkeypatch.setattr(cuda_build, "load", lambda source: library)
    monkeypatch.setattr(cuda, "why_not", lambda *args, **kwargs: None)  # no GPU here: nothing launches
    monkeypatch.setattr(cuda, "why_not_weight", lambda *args, **kwargs: None)
    heads, kv_heads, d, k, m = 4, 2, 16, 512, 3
    n, width = (heads + 2 * kv_heads) * d, (heads + kv_heads) * d
    x = torch.zeros(m, k, dtype=torch.bfloat16)
    codes = torch.zeros(n, k, dtype=torch.int8)
    scale, bias = torch.ones(n, 1), torch.zeros(n, dtype=torch.bfloat16)
    cos = sin = torch.zeros(40, d, dtype=torch.bfloat16)
    pool = torch.zeros(64, d, dtype=torch.bfloat16)
    kv = KVAppend(pool, pool, torch.arange(m * kv_heads), heads * d, kv_heads, d) if append else None
    cuda.codes_qkv_rope(x, codes, scale, bias, cos, sin, 17, 1, width, d, kv, pdl=True)
    if append:  # every pointer given: the kinds check covers all of them
        assert_matches(library, "cuda.cu")
    ((function, args),) = library.calls
    params = signature("cuda.cu", function)
    assert function == "rooflint_skinny_codes_rope" and len(args) == len(params)
    named = dict(zip(["x", "w", "scale", "bias", "y", "m", "n", "k", "x_row", "y_row", "steps", "format", "pdl",
                      "cos", "sin", "rope_width", "rope_dim", "rope_start", "rope_tokens", "slots", "k_rows",
                      "v_rows", "kv_start", "kv_width", "kv_heads", "head_dim"], args, strict=True))  # fmt: skip
    assert (named["m"], named["n"], named["k"], named["steps"], named["format"], named["pdl"]) == (m, n, k, 8, 0, 1)
    assert (named["rope_width"], named["rope_dim"], named["rope_start"], named["rope_tokens"]) == (width, d, 17, 1)
    if append:
        assert (named["kv_start"], named["kv_width"], named["kv_heads"], named["head_dim"]) == (heads * d, kv_heads * d,
                                                                                               kv_heads, d)  # fmt: skip
        assert named["slots"] is kv.slots and named["k_rows"] is pool
    else:
        assert named["slots"] is None and named["kv_width"] == 0
