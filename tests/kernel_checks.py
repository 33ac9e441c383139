"""Shared correctness checks for family tests: one variant on the CPU against float64, the GPU
tier's checks (both 16-bit dtypes against float64; identical bits over repeated calls), and
the CPU's compile of the Gluon kernels for sm_90a (tests/fixtures/compile_gluon.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from rooflint.core.registry import get_family
from rooflint.engine.correctness import check


def assert_variant_matches_reference(family_name: str, variant: str, params: dict, dtype: str, seed: int = 0):
    family = get_family(family_name)
    case = family.build_case("custom", params, dtype, torch.device("cpu"), seed=seed)
    expected = family.reference(case.inputs, params)
    output = family.variants[variant].build(case)()
    verdict = check(family, dtype, output, expected)
    assert verdict.passed, f"{family_name}/{variant} {dtype} {params}: {verdict.message}"
    return output


def assert_matches_float64(family_name: str, label: str, params: dict, run_case, seed: int, device: str = "cuda"):
    """run_case(case) -> the output, for this family at these params, in bf16 and fp16 (the GPU
    tier's 16-bit paths: tanh.approx, TMA, wgmma), each against float64; prints each error."""
    family = get_family(family_name)
    for dtype in ("bf16", "fp16"):
        case = family.build_case("custom", params, dtype, torch.device(device), seed=seed)
        output = run_case(case)
        if device == "cuda":
            torch.cuda.synchronize()
        verdict = check(family, dtype, output, family.reference(case.inputs, params))
        print(f"{family_name} {label} {dtype}: relative error {verdict.error:.3g}")
        assert verdict.passed, f"{family_name} {label} {dtype}: {verdict.message}"


def assert_attention_matches_float64(label: str, d: int, n: int, causal: bool, attend) -> None:
    """attend(case) -> O for B=2, H=3 at this N, D and mask on the GPU, in bf16 and fp16, against float64."""
    params = {"B": 2, "H": 3, "N": n, "D": d, "causal": causal}
    assert_matches_float64("attention", f"{label} D={d} N={n} causal={causal}", params, attend, seed=n + d)


def assert_repeatable(run, calls: int = 20) -> None:
    """``calls`` more calls of ``run`` give the first call's bits: no consumer of a producer's ring
    reads a stage that is being refilled (a race would change some call's result)."""
    first = run().clone()
    for _ in range(calls):
        assert torch.equal(run(), first)


GLUON_KERNELS = ("attention", "gemm", "scaled_gemm")
_gluon_compiled: tuple[dict[str, list[dict]], set[str], str] | None = None  # rows, kernels done, stderr


def compile_gluon_for_sm90(kernel: str, tmp_path_factory) -> list[dict]:
    """What tests/fixtures/compile_gluon.py reports for `kernel` (one of GLUON_KERNELS), one dict per
    compiled case. It runs in a subprocess, as it replaces Triton's driver, with a fresh cache: once
    per test process for all three kernels (the three tests share an xdist_group), since each start
    imports torch and Triton again (2 s), and each kernel is compiled in full either way."""
    global _gluon_compiled
    if _gluon_compiled is None:
        script = Path(__file__).parent / "fixtures" / "compile_gluon.py"
        cache_dir = tmp_path_factory.mktemp("gluon-triton-cache")
        env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(cache_dir)}  # a real compile
        done = subprocess.run(
            [sys.executable, str(script), *GLUON_KERNELS], capture_output=True, text=True, timeout=600, env=env
        )
        rows: dict[str, list[dict]] = {}
        finished: set[str] = set()
        current = None
        for line in done.stdout.splitlines():
            if line.startswith("# kernel "):
                current = line.removeprefix("# kernel ")
                rows[current] = []
            elif line.startswith("# done "):
                finished.add(line.removeprefix("# done "))
            elif line.startswith("{"):
                rows[current].append(json.loads(line))
        _gluon_compiled = (rows, finished, f"exit {done.returncode}: {done.stderr[-4000:]}")
    rows, finished, stderr = _gluon_compiled
    assert kernel in finished, stderr  # its compile raised, or the process died before it ended
    return rows[kernel]


def rope_tables(positions: int, head_dim: int, dtype):
    """cos and sin [positions, head_dim] as a Llama model holds them (cat(freqs, freqs), theta 500000)."""
    inv = 1.0 / 500000.0 ** (torch.arange(0, head_dim, 2, device="cuda").float() / head_dim)
    angles = torch.arange(positions, device="cuda").float()[:, None] * inv[None, :]
    both = torch.cat((angles, angles), dim=-1)
    return both.cos().to(dtype), both.sin().to(dtype)


def assert_appended(got, k_pool, v_pool, slots, heads: int, width: int, d: int):
    """A QKV epilogue's paged append: exactly the rotated K and the V of ``got`` in their slots of
    the pools (NaN-filled before the call), and no other slot written."""
    assert torch.equal(k_pool[slots], got[:, heads * d : width].reshape(-1, d))
    assert torch.equal(v_pool[slots], got[:, width:].reshape(-1, d))
    untouched = torch.ones(k_pool.shape[0], dtype=torch.bool, device=k_pool.device)
    untouched[slots] = False
    assert torch.isnan(k_pool[untouched]).all() and torch.isnan(v_pool[untouched]).all()


def assert_swiglu_matches_float64(swiglu, m: int, k: int, ffn: int, dtype, tol: float, runs) -> None:
    """A fused gate/up projection ``swiglu(x, w, bias, pdl)`` -> silu(gate) * up [M, ffn] against float64,
    for each (with bias, pdl) of ``runs``: gate and up rounded to the dtype first, as the unfused GEMM's
    output is; the error within ``tol`` of the result's scale."""
    gen = torch.Generator(device="cuda").manual_seed(m * 31 + k + ffn)
    x = torch.randn(m, k, device="cuda", generator=gen).to(dtype)
    w = (torch.randn(2 * ffn, k, device="cuda", generator=gen) * k**-0.5).to(dtype)
    b = torch.randn(2 * ffn, device="cuda", generator=gen).to(dtype)
    for with_bias, pdl in runs:
        bias = b if with_bias else None
        got = swiglu(x, w, bias, pdl)
        y = torch.nn.functional.linear(x.double(), w.double(), None if bias is None else bias.double())
        gate, up = y[:, :ffn].to(dtype).double(), y[:, ffn:].to(dtype).double()
        want = torch.nn.functional.silu(gate) * up
        err = (got.double() - want).abs().max().item()
        assert got.shape == (m, ffn) and err <= tol * (1 + want.abs().max().item()), (with_bias, pdl, err)


def projection_inputs(m: int, k: int, n: int, dtype) -> tuple[torch.Tensor, ...]:
    """x [M, K], w [N, K] scaled by K^-1/2, a bias [N] and a residual [M, N] on the GPU, seeded by the shape."""
    gen = torch.Generator(device="cuda").manual_seed(m * 7919 + k + n)
    x = torch.randn(m, k, device="cuda", generator=gen).to(dtype)
    w = (torch.randn(n, k, device="cuda", generator=gen) * k**-0.5).to(dtype)
    b = torch.randn(n, device="cuda", generator=gen).to(dtype)
    r = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
    return x, w, b, r
