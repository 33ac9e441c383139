"""The Gluon attention (`triton_gluon`) on a machine without a GPU: it compiles for sm_90a, to the
schedule it claims (wgmma, TMA loads, a warp-specialized producer), inside an H100's shared memory;
and the variant is skipped with its reason wherever it cannot run. Gluon has no CPU interpreter, so
its numbers are checked against float64 on the GPU tier (tests/gpu/test_gpu_attention_gluon.py)."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import compile_gluon_for_sm90

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.kernels.attention import gluon as ag

needs_gluon = pytest.mark.skipif(not ag.HAS_GLUON, reason="this Triton has no Gluon Hopper ops")


@needs_gluon
@pytest.mark.xdist_group("gluon_sm90a")  # one compile process for the three kernels
def test_gluon_attention_compiles_to_its_schedule_for_sm90a(tmp_path_factory):
    rows = compile_gluon_for_sm90("attention", tmp_path_factory)
    assert len(rows) == 2 * len(ag.TILES), rows  # each head dim with and without the causal mask
    assert {row["head_dim"] for row in rows} == {64, 128, 256}
    assert {(row["causal"], row["dtype"]) for row in rows} == {(False, "torch.bfloat16"), (True, "torch.float16")}
    for row in rows:
        assert row["cubin_bytes"] > 0, row
        assert 0 < row["shared_bytes"] <= 227 * 1024, row  # one program per SM on an H100 / H200
        assert row["wgmma"] > 0 and row["tma_loads"] > 0, row
        assert row["setmaxnreg"] > 0, row  # the producer warp gives its registers to the consumers
        assert row["warps"] >= 9, row  # two consumer warpgroups and the producer
        assert row["spill_bytes"] == 0, row  # ptxas spills nothing (D=256's 64 x 256 fp32 accumulators fit)


def test_gluon_variant_is_skipped_with_its_reason_on_a_cpu():
    family = get_family("attention")
    params = {"B": 1, "H": 1, "N": 16, "D": 128, "causal": False}
    case = family.build_case("custom", params, "bf16", torch.device("cpu"))
    with pytest.raises(VariantSkipped, match="CPU interpreter|Gluon"):
        family.variants["triton_gluon"].build(case)


@needs_gluon
@pytest.mark.parametrize(
    "capability,head_dim,dtype,expected",
    [
        ((9, 0), 128, torch.bfloat16, None),
        ((9, 0), 128, torch.float16, None),
        ((8, 0), 128, torch.bfloat16, "sm_90"),
        ((10, 0), 128, torch.bfloat16, "sm_90"),
        ((9, 0), 64, torch.float16, None),
        ((9, 0), 256, torch.bfloat16, None),
        ((9, 0), 96, torch.bfloat16, "head_dim"),
        ((9, 0), 128, torch.float32, "fp16 or bf16"),
    ],
)
def test_gluon_attention_runs_only_where_it_was_measured(monkeypatch, capability, head_dim, dtype, expected):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    reason = ag.unsupported_reason(torch.device("cuda", 0), head_dim, dtype)
    assert reason is None if expected is None else expected in reason
