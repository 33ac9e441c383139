"""The Llama family's library kernel sets (liger, flashinfer, fa4) on a CPU, with FAKE libraries.

The fakes (tests/fake_libraries.py) have the real functions' signatures and, where the real kernel
has a quirk the set must respect, the quirk: Liger's SwiGLU strides both inputs by its output's
row, FlashInfer's norm and RoPE write in place, its decode wrapper and FlashAttention-4's varlen
call read the cache length from a device tensor when they run. Each set's logits and greedy tokens
are checked against Hugging Face's on the tiny Llama; which slots each set replaced is read from
the calls its fakes saw and from its plan.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest
import torch
import torch.nn.functional as F
from fake_libraries import install
from tiny_llama import TINY_LLAMA

from rooflint.core.errors import UserError, VariantSkipped
from rooflint.models import checks, library_sets, llama
from rooflint.models.base import OpRecorder, build
from rooflint.models.cache import KVCache
from rooflint.models.model_run import validate
from rooflint.models.outcome import ModelRequest

pytest.importorskip("transformers", reason="the model tests need transformers")

CPU = torch.device("cpu")
SETS = library_sets.LIBRARY_SET_CLASSES


def _norm(x, w, eps):
    wide = x.float()
    return w * (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _attend(q, k, v, length, causal):
    """q [B, T, H, D], k and v [B, S, H_kv, D], the first ``length`` keys: GQA by repeating K and V."""
    group = q.shape[2] // k.shape[2]
    k, v = (t[:, :length].repeat_interleave(group, dim=2).transpose(1, 2) for t in (k, v))
    return F.scaled_dot_product_attention(q.transpose(1, 2), k, v, is_causal=causal).transpose(1, 2)


def fake_liger(monkeypatch, calls):
    def rms_norm(X, W, eps, offset=0.0, casting_mode="llama", in_place=True):
        calls.append("rms_norm")
        return _norm(X, W, eps)

    def fused_add_rms_norm(X, R, W, eps, offset=0.0, casting_mode="llama", in_place=True):
        calls.append("add_rms_norm")
        return _norm(X + R, W, eps), X + R

    def rope(q, k, cos, sin, position_ids=None, unsqueeze_dim=1, rotary_dim=None):
        calls.append("rope")
        return _rotate(q, cos, sin), _rotate(k, cos, sin)

    def swiglu(a, b):
        calls.append("swiglu")
        # the kernel strides a and b by its contiguous output's row
        a, b = (t.as_strided(t.shape, (t.shape[-1], 1)) for t in (a, b))
        return F.silu(a) * b

    install(monkeypatch, "liger_kernel.transformers.functional", "0.8.5", liger_rms_norm=rms_norm,
            liger_fused_add_rms_norm=fused_add_rms_norm, liger_rope=rope, liger_swiglu=swiglu)  # fmt: skip


class FakeDecodeWrapper:
    """BatchDecodeWithPagedKVCacheWrapper's interface: HND pages; its buffers read when it runs."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, use_tensor_cores=False,
                 paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None,
                 backend="auto", jit_args=None):  # fmt: skip
        assert kv_layout == "HND" and use_cuda_graph
        self.indptr, self.indices = paged_kv_indptr_buffer, paged_kv_indices_buffer
        self.last_page_len = paged_kv_last_page_len_buffer

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size, **kwargs):
        self.indptr.copy_(indptr)
        self.indices[: len(indices)].copy_(indices)
        self.last_page_len.copy_(last_page_len)
        self.page_size = page_size

    def run(self, q, paged_kv_cache, **kwargs):
        FakeDecodeWrapper.calls.append("decode_attention")
        k_pages, v_pages = paged_kv_cache
        out = torch.empty_like(q)
        for b in range(q.shape[0]):
            pages = self.indices[self.indptr[b] : self.indptr[b + 1]].long()
            length = (len(pages) - 1) * self.page_size + int(self.last_page_len[b])
            k, v = (p[pages].transpose(0, 1).reshape(p.shape[1], -1, p.shape[3]) for p in (k_pages, v_pages))
            out[b] = _attend(q[b][None, None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], length, False)[0, 0]
        return out


def fake_flashinfer(monkeypatch, calls):
    def rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
        calls.append("rms_norm")
        return _norm(input, weight, eps)

    def fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
        calls.append("add_rms_norm")
        residual.add_(input)
        input.copy_(_norm(residual, weight, eps))

    def apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size, cos_sin_cache, is_neox=True):
        calls.append("rope")
        assert cos_sin_cache.dtype == torch.float32 and is_neox
        cos, sin = cos_sin_cache[positions].chunk(2, dim=-1)
        cos, sin = (torch.cat((t, t), dim=-1)[:, None] for t in (cos, sin))
        for x in (query, key):
            heads = x.view(x.shape[0], -1, head_size)
            heads.copy_(_rotate(heads.float(), cos, sin).to(x.dtype))

    FakeDecodeWrapper.calls = calls
    install(monkeypatch, "flashinfer", "0.7.2")
    install(monkeypatch, "flashinfer.norm", rmsnorm=rmsnorm, fused_add_rmsnorm=fused_add_rmsnorm)
    install(monkeypatch, "flashinfer.rope", apply_rope_with_cos_sin_cache_inplace=apply_rope_with_cos_sin_cache_inplace)
    install(monkeypatch, "flashinfer.decode", BatchDecodeWithPagedKVCacheWrapper=FakeDecodeWrapper)


def fake_fa4(monkeypatch, calls):
    def flash_attn_func(q, k, v, qv=None, gather_kv_indices=None, softmax_scale=None, causal=False, **kwargs):
        calls.append("prefill_attention")
        return _attend(q, k, v, k.shape[1], causal), None

    def flash_attn_varlen_func(q, k, v, qv=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                               max_seqlen_k=None, min_seqlen_k=None, seqused_q=None, seqused_k=None,
                               num_splits=1, **kwargs):  # fmt: skip
        calls.append("decode_attention")
        # SM 8.x/9.x/12.x assert no split-KV (flash_attn/cute/interface.py); a CPU is none of SM 10/11
        assert num_splits == 1, f"split-KV (num_splits={num_splits}) is refused off SM 10.x/11.x"
        rows = [_attend(q[b : b + 1], k[b : b + 1], v[b : b + 1], int(seqused_k[b]), False) for b in range(len(q))]
        return torch.cat(rows), None

    install(monkeypatch, "flash_attn.cute", "4.0.0b36", flash_attn_func=flash_attn_func,
            flash_attn_varlen_func=flash_attn_varlen_func)  # fmt: skip


FAKES = {"liger": fake_liger, "flashinfer": fake_flashinfer, "fa4": fake_fa4}
REPLACED = {"liger": {"rms_norm", "add_rms_norm", "rope", "swiglu"},
            "flashinfer": {"rms_norm", "add_rms_norm", "rope", "decode_attention"},
            "fa4": {"prefill_attention", "decode_attention"}}  # fmt: skip


def on_cpu(monkeypatch, name):
    """The set's library as one that runs on this CPU (its fakes are PyTorch), fp32 allowed."""
    cls = SETS[name]
    monkeypatch.setattr(cls, "library", dataclasses.replace(cls.library, devices=("cpu",)))
    monkeypatch.setattr(cls, "dtypes", ("fp32",))
    return cls


@pytest.fixture(scope="module")
def tiny():
    spec = llama.Llama({"tiny": TINY_LLAMA})
    return spec, build(spec, "tiny", torch.float32, CPU)


@pytest.mark.parametrize("name", list(SETS))
def test_each_set_replaces_its_librarys_ops_and_matches_hugging_face(monkeypatch, tiny, name):
    spec, loaded = tiny
    calls: list[str] = []
    on_cpu(monkeypatch, name)
    FAKES[name](monkeypatch, calls)
    kernels = spec.kernel_set(name, torch.float32, CPU, 16, spec.norm_eps(loaded.hf.config))
    assert kernels.name == name
    version = {"liger": "liger-kernel 0.8.5", "flashinfer": "flashinfer-python 0.7.2", "fa4": "flash-attn-4 4.0.0b36"}
    covered = {slot for slot, how in kernels.plan.items() if how.startswith(version[name])}
    assert covered == set(SETS[name].covers)
    assert all(kernels.plan[slot].startswith("eager (") for slot in SETS[name].keeps)  # each says why
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(1))
    logits = spec.forward(loaded.weights, kernels, ids, 0, None, OpRecorder())
    assert checks.relative_error(logits, checks.hf_logits(loaded.hf, ids)) < 1e-5
    # the prompt's K and V into the cache, then two decode steps against HF's last-position logits
    cache = KVCache(2, 2, 2, 16, 16, torch.float32, CPU)
    spec.forward(loaded.weights, kernels, ids[:, :6], 0, cache, OpRecorder(), last_only=True)
    for position in (6, 7):
        step = spec.forward(loaded.weights, kernels, ids[:, position : position + 1], position, cache, OpRecorder(),
                            last_only=True)  # fmt: skip
        expected = checks.hf_logits(loaded.hf, ids[:, : position + 1])[:, -1]
        assert checks.relative_error(step, expected) < 1e-5
    assert set(calls) == REPLACED[name]


def parse_plan(plan: str) -> dict[str, str]:
    """A set's plan line as tests/gpu/test_llama_library_sets_gpu.py reads it: "slot=how; slot=how"."""
    return dict(item.split("=", 1) for item in plan.split("; "))


@pytest.mark.parametrize("name", list(SETS))
def test_each_sets_plan_line_reads_back_slot_by_slot(monkeypatch, name):
    on_cpu(monkeypatch, name)
    FAKES[name](monkeypatch, [])
    kernels = llama.SPEC.kernel_set(name, torch.float32, CPU, 16, 1e-5)
    assert parse_plan(kernels.describe()) == kernels.plan  # no slot's text holds the "; " separator


@pytest.mark.parametrize(("major", "splits"), [(8, 1), (9, 1), (10, 0), (11, 0), (12, 1)])
def test_fa4_decode_asks_for_split_kv_only_where_flash_attention_4_builds_it(monkeypatch, major, splits):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, 0))
    assert library_sets.fa4_num_splits(torch.device("cuda", 0)) == splits
    assert library_sets.fa4_num_splits(CPU) == 1


def test_liger_set_runs_through_the_models_checks_against_hugging_face(monkeypatch, tmp_path):
    from rooflint.core.specs import measured_spec
    from rooflint.models.model_run import run_model
    from rooflint.outputs.results import OK

    on_cpu(monkeypatch, "liger")
    fake_liger(monkeypatch, [])
    spec = measured_spec("cpu", "CPU (test)", 10.0, {"tensor_fp32_tflops": 0.1, "cuda_fp32_tflops": 0.1}, "test")
    request = ModelRequest(model="llama", model_spec=llama.Llama({"tiny": TINY_LLAMA}), config="tiny", batch=1, seq=8,
                           prompt=4, new_tokens=3, dtype="fp32", kernels=["liger", "eager"], out=tmp_path,
                           device="cpu", spec=spec, rep_ms=0, plots=False)  # fmt: skip
    outcome = run_model(request)
    assert [result.name for result in outcome.sets] == ["eager", "liger"]  # run order, not the asked order
    liger = outcome.sets[1]
    assert liger.status == OK, liger.message
    assert liger.check.passed and liger.check.tokens_compared == 3
    assert "swiglu=liger-kernel" in liger.plan
    assert parse_plan(liger.plan)["rope"].startswith("liger-kernel 0.8.5: liger_rope")


@pytest.mark.parametrize("name", list(SETS))
def test_a_set_whose_library_is_missing_is_skipped_with_the_install_line(monkeypatch, name):
    cls = on_cpu(monkeypatch, name)
    monkeypatch.setitem(sys.modules, cls.library.module.partition(".")[0], None)  # import raises ImportError
    with pytest.raises(VariantSkipped) as skipped:
        llama.SPEC.kernel_set(name, torch.float32, CPU, 16, 1e-5)
    line = str(skipped.value)
    assert "\n" not in line and f"{cls.library.name} is not installed" in line
    assert f"pip install {cls.library.name}" in line and "rooflint[peers]" in line


def test_a_set_without_a_gpu_or_its_dtype_is_skipped_saying_so(monkeypatch):
    with pytest.raises(VariantSkipped, match="needs a CUDA GPU"):
        llama.SPEC.kernel_set("fa4", torch.bfloat16, CPU, 64, 1e-5)
    cls = SETS["flashinfer"]
    monkeypatch.setattr(cls, "library", dataclasses.replace(cls.library, devices=("cpu",)))
    fake_flashinfer(monkeypatch, [])
    with pytest.raises(VariantSkipped, match="take fp16, bf16, not fp32"):
        llama.SPEC.kernel_set("flashinfer", torch.float32, CPU, 64, 1e-5)


def test_a_release_without_a_function_is_skipped_naming_its_version(monkeypatch):
    on_cpu(monkeypatch, "liger")
    install(monkeypatch, "liger_kernel.transformers.functional", "0.3.0", liger_rms_norm=lambda *a: None)
    with pytest.raises(VariantSkipped, match=r"liger-kernel 0\.3\.0 has no .*liger_fused_add_rms_norm"):
        llama.SPEC.kernel_set("liger", torch.float32, CPU, 16, 1e-5)


def test_gpt2_skips_the_library_sets_and_an_unknown_set_is_refused_naming_the_valid_ones():
    from rooflint.models import gpt2

    with pytest.raises(VariantSkipped, match="Llama family"):
        gpt2.SPEC.kernel_set("liger", torch.float32, CPU, 64, 1e-5)
    request = ModelRequest(model="llama-3.2-1b", config="llama-3.2-1b", batch=1, seq=8, prompt=4, new_tokens=2,
                           dtype="bf16", kernels=["triton", "liger", "flashattention"])  # fmt: skip
    with pytest.raises(UserError) as refused:
        validate(request)
    line = str(refused.value)
    assert "'flashattention'" in line and "valid: eager, triton, cuda, liger, flashinfer, fa4, compile" in line
    assert validate(dataclasses.replace(request, kernels=["fa4", "flashinfer", "liger"])) == [
        "fa4",
        "flashinfer",
        "liger",
    ]
