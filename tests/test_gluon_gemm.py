"""The Gluon GEMM (gelu_linear's `triton_gluon`) on a machine without a GPU: it compiles for sm_90a to
the schedule it claims (wgmma, TMA loads and stores, a producer warp giving its registers to the
consumers) inside an H100's shared memory, without spills; and the variant is skipped with its reason
wherever it cannot run. Gluon has no CPU interpreter, so its numbers are checked against float64 on
the GPU tier (tests/gpu/test_gpu_gemm_gluon.py)."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import compile_gluon_for_sm90

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.kernels.gelu_linear import gluon as gg

needs_gluon = pytest.mark.skipif(not gg.HAS_GLUON, reason="this Triton has no Gluon Hopper ops")


@needs_gluon
@pytest.mark.xdist_group("gluon_sm90a")  # one compile process for the three kernels
def test_gluon_gemm_compiles_to_its_schedule_for_sm90a(tmp_path_factory):
    rows = compile_gluon_for_sm90("gemm", tmp_path_factory)
    # bf16 untraced (the bench's launch) and fp16 traced (the device scripts'): every dtype and launch
    assert [(row["dtype"], row["trace"]) for row in rows] == [("torch.bfloat16", False), ("torch.float16", True)]
    for row in rows:
        # Stamps only where asked for: the bench's launch carries none.
        assert (row["clock_reads"] > 0) == row["trace"], row
        assert row["cubin_bytes"] > 0, row
        assert 0 < row["shared_bytes"] <= 227 * 1024, row  # one CTA per SM on an H100 / H200
        # Two wgmma widths (128 and 64) over a 64-deep K step, in 16-deep instructions, per consumer.
        assert row["wgmma"] >= 2 * 4, row
        assert row["tma_loads"] >= 4 and row["tma_stores"] >= 2, row  # X twice, W's two boxes; Y's two boxes
        assert row["setmaxnreg"] > 0, row
        assert row["warps"] >= 9, row  # two consumer warpgroups and the producer
        assert row["spill_bytes"] == 0, row


def test_gluon_gemm_is_skipped_with_its_reason_on_a_cpu():
    family = get_family("gelu_linear")
    case = family.build_case("custom", {"m": 16, "k": 32, "n": 24}, "bf16", torch.device("cpu"))
    with pytest.raises(VariantSkipped, match="CPU interpreter|Gluon"):
        family.variants["triton_gluon"].build(case)


@needs_gluon
@pytest.mark.parametrize(
    "capability,dtype,k,n,expected",
    [
        ((9, 0), torch.bfloat16, 768, 3072, None),
        ((9, 0), torch.float16, 8, 8, None),
        ((8, 0), torch.bfloat16, 768, 3072, "sm_90"),
        ((10, 0), torch.bfloat16, 768, 3072, "sm_90"),
        ((9, 0), torch.float32, 768, 3072, "fp16 or bf16"),
        ((9, 0), torch.bfloat16, 770, 3072, "multiples of 8"),
        ((9, 0), torch.bfloat16, 768, 3071, "multiples of 8"),
    ],
)
def test_gluon_gemm_runs_only_where_it_can(monkeypatch, capability, dtype, k, n, expected):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    reason = gg.unsupported_reason(torch.device("cuda", 0), dtype, k, n)
    assert reason is None if expected is None else expected in reason
