"""Library peers as variants (issue 41), on the CPU with fake library modules: discovery, skip reasons
with the install line, the library and version columns, the float64 gate, "vs best library" in
reports, and compare's note when a library's release changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

import pytest
import torch
from fake_libraries import install
from result_factory import SOFTMAX_BF16, row, write
from typer.testing import CliRunner

from rooflint.analysis.compare import compare_frames
from rooflint.cli.app import app
from rooflint.core.errors import VariantSkipped
from rooflint.core.family import Family
from rooflint.engine.worker import Task, base_row, missing_requirement
from rooflint.kernels.common import libraries
from rooflint.kernels.common.libraries import Library
from rooflint.outputs.results import COLUMNS, read_results

runner = CliRunner()


# ------------------------------------------------------------------------------------------ discovery


def test_an_absent_library_is_skipped_with_its_install_line():
    absent = Library("no-such-peer", "no_such_peer_module_xyz")
    reason = absent.missing("cuda")
    assert reason.startswith("no-such-peer is not installed")
    assert "pip install no-such-peer" in reason and 'pip install "rooflint[peers]"' in reason
    assert absent.version() == ""
    with pytest.raises(VariantSkipped, match="pip install no-such-peer"):
        absent.load()


def test_a_peer_needs_a_cuda_gpu_even_when_installed(monkeypatch):
    install(monkeypatch, "fakepeer", "1.2.3")
    assert Library("fakepeer-dist", "fakepeer").missing("cpu") == "fakepeer-dist needs a CUDA GPU"


def test_a_library_whose_import_crashes_says_how(monkeypatch, tmp_path):
    (tmp_path / "crashingpeer.py").write_text("raise RuntimeError('no CUDA driver found')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reason = Library("crashing-peer", "crashingpeer").missing("cuda")
    assert reason == "crashing-peer failed to import: RuntimeError: no CUDA driver found"


@pytest.mark.parametrize(
    "library,capability,expected",
    [
        (libraries.QUACK, (8, 0), "quack-kernels needs sm_90 or newer; this GPU is sm_80"),
        (libraries.QUACK, (9, 0), None),
        (libraries.QUACK, (10, 0), None),
        (libraries.FLASH_ATTN_3, (10, 0), "flash-attn-3 has kernels for sm_90 only; this GPU is sm_100"),
        (libraries.FLASH_ATTN_3, (9, 0), None),
        (libraries.FLASH_ATTN_2, (7, 5), "flash-attn needs sm_80 or newer; this GPU is sm_75"),
        (libraries.FLASHINFER, (7, 5), None),
    ],
)
def test_the_gpu_check_names_the_architecture(monkeypatch, library, capability, expected):
    install(monkeypatch, library.module, "9.9")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert library.missing("cuda") == expected


def test_version_comes_from_the_distribution_else_the_module(monkeypatch):
    install(monkeypatch, "fakepeer", "1.2.3")
    peer = Library("fakepeer-dist", "fakepeer")
    assert peer.version() == "1.2.3"  # no distribution metadata: the module's __version__

    def installed(name):
        if name == "fakepeer-dist":
            return "2.0.0"
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(libraries.metadata, "version", installed)
    assert peer.version() == "2.0.0"


def test_a_function_missing_from_an_older_release_is_a_skip_naming_the_version(monkeypatch):
    install(monkeypatch, "fakepeer.ops", "0.3.0", softmax=lambda x: x)
    peer = Library("fakepeer-dist", "fakepeer")
    assert peer.function("ops", "softmax")(1) == 1
    with pytest.raises(VariantSkipped, match=r"fakepeer-dist 0\.3\.0 has no fakepeer\.ops\.rmsnorm; pip install -U"):
        peer.function("ops", "rmsnorm")


def test_the_peers_name_their_distributions_and_modules():
    names = {peer.name: peer.module for peer in libraries.PEERS}
    assert names == {
        "liger-kernel": "liger_kernel",
        "quack-kernels": "quack",
        "flashinfer-python": "flashinfer",
        "flash-attn-4": "flash_attn.cute",
        "flash-attn": "flash_attn.flash_attn_interface",
        "flash-attn-3": "flash_attn_interface",
    }


# --------------------------------------------------------------------------- the variant kind


def _family() -> Family:
    return Family(
        "peer_test",
        summary="x + 1",
        sizes={"small": [{"n": 8}], "large": [{"n": 16}]},
        make_inputs=lambda p, dtype, device, g: {"x": torch.zeros(p["n"], dtype=dtype, device=device)},
        reference=lambda inputs, p: inputs["x"].double() + 1,
        cost=lambda p, dtype: None,
    )


def test_a_library_variant_is_declared_with_its_library():
    family = _family()
    peer = Library("fakepeer-dist", "fakepeer")
    family.variant("peer", library=peer)(lambda case: None)
    assert family.variants["peer"].kind == "library" and family.variants["peer"].library is peer
    with pytest.raises(ValueError, match="needs library="):
        family.variant("no_library", kind="library")(lambda case: None)
    with pytest.raises(ValueError, match="only kind='library' takes one"):
        family.variant("mixed", kind="triton", library=peer)(lambda case: None)
    with pytest.raises(ValueError, match="cannot be the baseline"):
        family.variant("base", library=peer, baseline=True)(lambda case: None)
    family.variant("eager", baseline=True)(lambda case: None)
    assert [v.name for v in family.ordered_variants()] == ["eager", "peer"]  # library rows run last


def test_the_engine_skips_an_absent_library_and_stamps_library_rows(monkeypatch):
    from rooflint.core import registry

    family = _family()
    absent = Library("no-such-peer", "no_such_peer_module_xyz", devices=("cpu",))
    family.variant("absent", library=absent)(lambda case: None)
    install(monkeypatch, "fakepeer", "1.2.3")
    family.variant("present", library=Library("fakepeer-dist", "fakepeer", devices=("cpu",)))(lambda case: None)
    family.variant("eager", baseline=True)(lambda case: None)
    monkeypatch.setattr(registry, "get_family", lambda name: family)
    monkeypatch.setattr(sys.modules["rooflint.engine.worker"], "get_family", lambda name: family)
    assert "pip install no-such-peer" in missing_requirement(family.variants["absent"], "cpu")
    assert missing_requirement(family.variants["present"], "cpu") is None
    stamped = base_row(Task("peer_test", "present", "fp32", "small", {"n": 8}), "library", "ok")
    assert (stamped.library, stamped.library_version) == ("fakepeer-dist", "1.2.3")
    own = base_row(Task("peer_test", "eager", "fp32", "small", {"n": 8}), "eager", "ok")
    assert (own.library, own.library_version) == ("", "")
    assert {"library", "library_version"} <= set(COLUMNS)


# A family and a fake library on disk: bench runs variants in a measuring process, which must import both.
PEER_FAMILY = '''
import torch
from rooflint.core.family import Cost, Family
from rooflint.kernels.common.libraries import Library

FAKE = Library("fakepeer-dist", "fakepeer", devices=("cuda", "cpu"))
ABSENT = Library("absent-peer", "absent_peer_module_xyz", devices=("cuda", "cpu"))
FAMILY = Family(
    "peer_toy",
    summary="y = 2x",
    sizes={"small": [{"n": 4096}], "large": [{"n": 8192}]},
    make_inputs=lambda p, dtype, device, g: {"x": torch.randn(p["n"], generator=g).to(dtype)},
    reference=lambda inputs, p: 2 * inputs["x"].double(),
    cost=lambda p, dtype: Cost(cuda_flops=p["n"], bytes=8 * p["n"]),
)

@FAMILY.variant("eager", baseline=True)
def eager(case):
    """x * 2"""
    x = case["x"]
    return lambda: x * 2

@FAMILY.variant("peer_ok", library=FAKE)
def peer_ok(case):
    """the fake library's double"""
    double = FAKE.function("", "double")
    x = case["x"]
    return lambda: double(x)

@FAMILY.variant("peer_wrong", library=FAKE)
def peer_wrong(case):
    """the fake library's broken triple"""
    triple = FAKE.function("", "triple")
    x = case["x"]
    return lambda: triple(x)

@FAMILY.variant("peer_absent", library=ABSENT)
def peer_absent(case):
    """a library that is not installed"""
    return lambda: case["x"]
'''
FAKE_LIBRARY = """
__version__ = "1.2.3"

def double(x):
    return x + x

def triple(x):  # the planted bug: a peer that fails the float64 gate is reported, never timed
    return 3 * x
"""


def test_bench_runs_library_peers_through_the_float64_gate_and_reports_them(tmp_path):
    plugins = tmp_path / "plugins"
    (plugins / "fakepeer").mkdir(parents=True)
    (plugins / "peer_toy.py").write_text(PEER_FAMILY)
    (plugins / "fakepeer" / "__init__.py").write_text(FAKE_LIBRARY)
    env = {
        **os.environ,
        "ROOFLINT_FAMILY_MODULES": "peer_toy",
        "PYTHONPATH": str(plugins) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "COLUMNS": "250",
    }
    out = tmp_path / "out"
    done = subprocess.run(
        ["rooflint", "bench", "peer_toy", "--device", "cpu", "--dtype", "fp32", "--out", str(out), "--no-plots"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # peer_wrong failed its check
    rows = {r["variant"]: r for r in read_results(out / "results.csv").to_dict("records")}
    assert rows["peer_ok"]["status"] == "ok" and rows["peer_ok"]["kind"] == "library"
    assert (rows["peer_ok"]["library"], rows["peer_ok"]["library_version"]) == ("fakepeer-dist", "1.2.3")
    assert rows["peer_wrong"]["status"] == "failed" and "exceeds tolerance" in rows["peer_wrong"]["message"]
    assert rows["peer_wrong"]["median_ms"] != rows["peer_wrong"]["median_ms"]  # NaN: never timed
    assert rows["peer_absent"]["status"] == "skipped"
    assert "pip install absent-peer" in rows["peer_absent"]["message"]
    assert rows["eager"]["library"] == ""
    report = subprocess.run(
        ["rooflint", "report", str(out / "results.csv")], capture_output=True, text=True, env=env, timeout=300
    )
    # peer_wrong failed its check: the report is written whole and exits 1 for it
    assert report.returncode == 1, report.stderr
    assert "1 row did not pass (1 failed): peer_toy/peer_wrong" in report.stderr
    assert "vs best library" in report.stdout
    assert r"| peer_ok \[fakepeer-dist 1.2.3\] |" in report.stdout  # Markdown escapes the brackets


# ----------------------------------------------------------------------------- reports and compare


def _softmax_rows():
    softmax = {"family": "softmax", "cost": SOFTMAX_BF16, "shape": "M=4096,N=8192"}
    return [
        row(variant="eager", median_ms=0.49, **softmax),
        row(variant="compile_builtin", kind="compile", median_ms=0.378, **softmax),
        row(variant="triton", median_ms=0.352, **softmax),
        row(
            variant="liger", kind="library", median_ms=0.36, library="liger-kernel", library_version="0.6.1", **softmax
        ),
        row(
            variant="quack", kind="library", median_ms=0.34, library="quack-kernels", library_version="0.2.1", **softmax
        ),
        row(
            variant="broken_peer",
            kind="library",
            median_ms=0.1,
            status="failed",
            message="rel error 0.4",
            library="quack-kernels",
            library_version="0.2.1",
            **softmax,
        ),  # fmt: skip
    ]


def test_every_row_is_judged_against_the_fastest_library_that_passed(tmp_path):
    path = write(_softmax_rows(), tmp_path / "r")
    payload = json.loads(runner.invoke(app, ["report", str(path), "--format", "json"]).stdout)
    [section] = payload["gpus"]
    rows = {r["variant"]: r for f in section["families"] for r in f["rows"]}
    # quack at 0.34 ms is the best library that passed; the failed peer's 0.1 ms counts for nothing.
    assert rows["triton"]["speedup_vs_best_library"] == pytest.approx(0.34 / 0.352)
    assert rows["liger"]["speedup_vs_best_library"] == pytest.approx(0.34 / 0.36)
    assert rows["quack"]["speedup_vs_best_library"] == pytest.approx(1.0)
    assert rows["broken_peer"]["speedup_vs_best_library"] is None
    assert rows["quack"]["library"] == "quack-kernels" and rows["quack"]["library_version"] == "0.2.1"
    text = runner.invoke(app, ["report", str(path)]).stdout
    header = text[text.index("### softmax") :].splitlines()[2]
    assert header.index("vs best compile") < header.index("vs best library")
    assert r"| quack \[quack-kernels 0.2.1\] |" in text  # Markdown escapes the brackets
    assert r"| broken_peer \[quack-kernels 0.2.1\] (failed: rel error 0.4) |" in text


def test_no_library_column_where_no_library_ran(tmp_path):
    rows = [r for r in _softmax_rows() if r.kind != "library"]
    text = runner.invoke(app, ["report", str(write(rows, tmp_path / "r"))]).stdout
    assert "vs best library" not in text


def test_the_interactive_page_marks_library_rows(tmp_path):
    out = tmp_path / "report.html"
    result = runner.invoke(
        app, ["report", str(write(_softmax_rows(), tmp_path / "r")), "--format", "html", "--out", str(out)]
    )
    assert result.exit_code == 1, result.output  # broken_peer failed its check: written, and failed
    page = out.read_text()
    assert "softmax / quack (library) [quack-kernels 0.2.1]" in page
    assert "1.07x vs best compile · 0.97x vs best library" in page  # triton: 0.378/0.352, 0.34/0.352
    assert 'data-kind="library"' in page


def test_compare_matches_library_rows_and_notes_a_new_release(tmp_path):
    base = _softmax_rows()
    new = _softmax_rows()
    new[3].library_version = "0.7.0"  # liger upgraded between the runs
    result = compare_frames(read_results(write(base, tmp_path / "b")), read_results(write(new, tmp_path / "n")), 0.05)
    verdicts = {e.variant: e.verdict for e in result.entries}
    assert verdicts["liger"] == "same" and verdicts["quack"] == "same"
    assert any("liger-kernel 0.6.1 -> 0.7.0: another release of the library" in note for note in result.notes)
    assert not any("quack" in note for note in result.notes)


def test_the_peers_extra_lists_every_library():
    from pathlib import Path

    import tomllib

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    extra = " ".join(project["optional-dependencies"]["peers"])
    for peer in ("liger-kernel", "quack-kernels", "flash-attn-4", "flashinfer-python"):
        assert peer in extra


# ------------------------------------------- the adapters of existing families, against fake libraries
# Each fake follows the library's documented contract (argument order, layouts, what it overwrites),
# so these hold the adapters' layout conversions against float64; the GPU tier runs the real ones.


def _sdpa_bshd(q, k, v, causal):
    out = torch.nn.functional.scaled_dot_product_attention(
        *(t.transpose(1, 2).float() for t in (q, k, v)), is_causal=causal
    )
    return out.transpose(1, 2).to(q.dtype)


def _fake_flash_attention(monkeypatch):
    def fa4(q, k, v, qv=None, gather_kv_indices=None, softmax_scale=None, causal=False, **options):
        return _sdpa_bshd(q, k, v, causal), torch.zeros(1)  # FA4 returns (out, lse)

    def fa2(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, **options):
        return _sdpa_bshd(q, k, v, causal)

    install(monkeypatch, "flash_attn.flash_attn_interface", "2.8.3", flash_attn_func=fa2)
    install(monkeypatch, "flash_attn.cute", flash_attn_func=fa4)
    install(monkeypatch, "flash_attn_interface", flash_attn_func=fa2)


class _FakeBatchDecode:
    """FlashInfer's paged decode: pages [num_pages, kv_heads, page_size, head_dim] (HND), a page table."""

    def __init__(self, workspace, kv_layout="NHD", use_tensor_cores=False, **options):
        assert kv_layout == "HND"

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size, **options):
        self.table = (indptr.tolist(), indices.long(), last_page_len.tolist(), page_size)

    def run(self, q, paged_kv_cache):
        (indptr, indices, last, page_size), (k_cache, v_cache) = self.table, paged_kv_cache
        b, h, d = q.shape
        out = torch.empty_like(q)
        for i in range(b):
            pages = indices[indptr[i] : indptr[i + 1]]
            length = (len(pages) - 1) * page_size + last[i]
            k, v = (c[pages].transpose(0, 1).reshape(c.shape[1], -1, d)[:, :length].float() for c in (k_cache, v_cache))
            qg = q[i].float().view(k.shape[0], -1, d)
            scores = torch.softmax(qg @ k.transpose(-1, -2) / d**0.5, dim=-1)
            out[i] = (scores @ v).reshape(h, d).to(q.dtype)
        return out


def _rotate_half(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def _fake_flashinfer(monkeypatch):
    def apply_rope(q, k, indptr, offsets, rotary_dim=None, interleave=False, rope_scale=1, rope_theta=1e4):
        assert not interleave
        d = q.shape[-1]
        positions = torch.cat(
            [offsets[i] + torch.arange(int(indptr[i + 1] - indptr[i])) for i in range(len(offsets))]
        ).double()
        angles = positions[:, None] * rope_theta ** (-torch.arange(d // 2, dtype=torch.float64) * 2 / d)
        cos, sin = (f(angles)[:, None, :].float() for f in (torch.cos, torch.sin))
        return _rotate_half(q, cos, sin), _rotate_half(k, cos, sin)

    install(
        monkeypatch, "flashinfer", "0.7.2", BatchDecodeWithPagedKVCacheWrapper=_FakeBatchDecode, apply_rope=apply_rope
    )


def _fake_liger(monkeypatch):
    def liger_rope(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
        # [batch, heads, seq, head_dim] views; rotated in the storage under them, as Liger's kernel does
        half = q.shape[-1] // 2
        c, s = cos[:, None, :, :half], sin[:, None, :, :half]
        q.copy_(_rotate_half(q, c, s))
        k.copy_(_rotate_half(k, c, s))
        return q, k

    def layer_norm_forward(X, W, B, eps):
        xf = X.float()
        mean, var = xf.mean(-1), xf.var(-1, unbiased=False)
        rstd = torch.rsqrt(var + eps)
        y = ((xf - mean[:, None]) * rstd[:, None] * W.float() + B.float()).to(X.dtype)
        return y, X, mean.to(X.dtype), rstd.to(X.dtype), 1024, 4  # Liger keeps mean and rstd in X's dtype

    install(monkeypatch, "liger_kernel.ops.layer_norm", "0.8.5", layer_norm_forward=layer_norm_forward)
    install(
        monkeypatch,
        "liger_kernel.transformers.functional",
        liger_rope=liger_rope,
        liger_softmax=lambda x: torch.softmax(x.float(), -1).to(x.dtype),
    )


def _fake_quack(monkeypatch):
    def layernorm_fwd(x, weight, bias=None, eps=1e-6, return_rstd=False, return_mean=False):
        assert weight.dtype == torch.float32 and bias.dtype == torch.float32  # quack's requirement
        xf = x.float()
        mean, rstd = xf.mean(-1), torch.rsqrt(xf.var(-1, unbiased=False) + eps)
        return ((xf - mean[:, None]) * rstd[:, None] * weight + bias).to(x.dtype), rstd, mean

    install(monkeypatch, "quack.rmsnorm", "0.6.4", layernorm_fwd=layernorm_fwd)
    install(monkeypatch, "quack.softmax", softmax=lambda x: torch.softmax(x.float(), -1).to(x.dtype))


ADAPTERS = [
    ("attention", "flash_attn_4", _fake_flash_attention, [{"B": 2, "H": 3, "N": 37, "D": 64, "causal": True}]),
    ("attention", "flash_attn_3", _fake_flash_attention, [{"B": 1, "H": 2, "N": 20, "D": 64, "causal": False}]),
    ("attention", "flash_attn_2", _fake_flash_attention, [{"B": 1, "H": 2, "N": 20, "D": 64, "causal": True}]),
    ("decode_attention", "flashinfer", _fake_flashinfer, [{"b": 3, "h": 8, "h_kv": 2, "c": 37, "d": 64}]),
    # 37 tokens: two full 16-token pages and a last page of 5, placed in a shuffled order
    ("decode_attention", "flashinfer_paged", _fake_flashinfer, [{"b": 3, "h": 8, "h_kv": 2, "c": 37, "d": 64}]),
    ("rope", "flashinfer", _fake_flashinfer, [{"batch": 2, "seq": 9, "heads": 3, "head_dim": 64}]),
    ("rope", "liger", _fake_liger, [{"batch": 2, "seq": 9, "heads": 3, "head_dim": 64}]),
    ("layernorm", "liger", _fake_liger, [{"rows": 5, "hidden": 300}]),
    ("layernorm", "quack", _fake_quack, [{"rows": 5, "hidden": 296}]),  # quack takes whole 16-byte rows
    ("softmax", "liger", _fake_liger, [{"rows": 5, "cols": 300}]),
    ("softmax", "quack", _fake_quack, [{"rows": 5, "cols": 296}]),
]


@pytest.mark.parametrize("family_name,variant_name,fake,cases", ADAPTERS, ids=[f"{a[0]}-{a[1]}" for a in ADAPTERS])
def test_existing_families_adapters_match_float64_and_leave_the_inputs_alone(
    monkeypatch, family_name, variant_name, fake, cases
):
    from rooflint.core.registry import get_family
    from rooflint.engine.correctness import check

    fake(monkeypatch)
    family = get_family(family_name)
    variant = family.variants[variant_name]
    assert variant.kind == "library"
    for params in cases:
        case = family.build_case("custom", params, "bf16", torch.device("cpu"))
        before = {name: t.clone() for name, t in case.inputs.items() if isinstance(t, torch.Tensor)}
        call = variant.build(case)
        first = call()
        call()  # the engine calls again (to measure memory) before it checks the first output
        verdict = check(family, "bf16", first, family.reference(case.inputs, params))
        assert verdict.passed, f"{variant_name} {params}: {verdict.message}"
        for name, tensor in before.items():
            assert torch.equal(case.inputs[name], tensor), f"{variant_name} overwrote {name}"
