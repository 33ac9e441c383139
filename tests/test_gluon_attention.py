"""The Gluon attention (`triton_gluon`) on a machine without a GPU: it compiles for sm_90a, to the
schedule it claims (wgmma, TMA loads, a warp-specialized producer), inside an H100's shared memory;
and the variant is skipped with its reason wherever it cannot run. Gluon has no CPU interpreter, so
its numbers are checked against float64 on the GPU tier (tests/gpu/test_gpu_attention_gluon.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rooflint.core.errors import VariantSkipped
from rooflint.core.registry import get_family
from rooflint.kernels import _attention_gluon as ag

needs_gluon = pytest.mark.skipif(not ag.HAS_GLUON, reason="this Triton has no Gluon Hopper ops")


@needs_gluon
def test_gluon_attention_compiles_to_its_schedule_for_sm90a(tmp_path):
    script = Path(__file__).parent / "fixtures" / "compile_gluon_attention.py"
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path)}  # a real compile each run
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and len(rows) == 4, done.stderr[-2000:]
    for row in rows:
        assert row["cubin_bytes"] > 0, row
        assert 0 < row["shared_bytes"] <= 227 * 1024, row  # one program per SM on an H100 / H200
        assert row["wgmma"] > 0 and row["tma_loads"] > 0, row
        assert row["setmaxnreg"] > 0, row  # the producer warp gives its registers to the consumers
        assert row["warps"] >= 9, row  # two consumer warpgroups and the producer


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
        ((9, 0), 64, torch.bfloat16, "head_dim"),
        ((9, 0), 128, torch.float32, "fp16 or bf16"),
    ],
)
def test_gluon_attention_runs_only_where_it_was_measured(monkeypatch, capability, head_dim, dtype, expected):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    reason = ag.unsupported_reason(torch.device("cuda", 0), head_dim, dtype)
    assert reason is None if expected is None else expected in reason
