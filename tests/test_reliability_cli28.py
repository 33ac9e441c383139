"""Two inputs every reader or runner once took as something else:

- a model config.json whose max_position_embeddings is enormous: its RoPE cos/sin tables (one row
  per position, whatever the run's length) were left out of the memory check made before building,
  so `rooflint model` started building and failed allocating terabytes (exit 1) instead of refusing
  the config in one line;
- a results file whose gpu column spells the CPU "CPU" (a hand edit, another tool) beside
  rooflint's "cpu": every reader took it for a second GPU (two report sections and roofline plots,
  merge keeping both rows of one key, lint's wrong_gpu error on a row judged on its own CPU).

The user-visible behaviour is driven through the installed console script, as a user runs it.
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
from console_script import assert_refused, needs_console_script, run_in
from result_factory import CPU, SOFTMAX_BF16, row, write
from tiny_llama import TINY_LLAMA

from rooflint.core.errors import UserError

MODEL = ["--device", "cpu", "--batch", "1", "--seq", "8", "--prompt", "4", "--new-tokens", "2", "--no-plots"]
HUGE = 10**12
# One worker runs the module: its `rooflint model` run and the readers' runs are made once, not on each.
pytestmark = pytest.mark.xdist_group("cli28_runs")


# ---------------------------------------------------------------- RoPE tables in the memory check


@pytest.fixture(scope="module")
def huge_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """`rooflint model` on the tiny Llama's config.json with 10**12 positions."""
    pytest.importorskip("transformers", reason="the model runs need transformers")
    root = tmp_path_factory.mktemp("rope_tables")
    (root / "huge.json").write_text(json.dumps({**TINY_LLAMA, "max_position_embeddings": HUGE}))
    out = root / "out"
    return run_in(root, "model", root / "huge.json", *MODEL, "--out", out), out


@needs_console_script
def test_a_config_whose_rope_tables_cannot_fit_is_refused_in_one_line(huge_run):
    done, out = huge_run
    # one line, before "building": what is wrong (the field, the tables) and what is valid
    assert_refused(done, f"max_position_embeddings={HUGE}", "RoPE cos/sin tables", "valid: max_position_embeddings")
    assert not (out / "results.csv").exists()


def _spec(positions: int, **fields):
    pytest.importorskip("transformers", reason="the model specs need transformers")
    from rooflint.models import llama

    spec = llama.Llama({"tiny": {**TINY_LLAMA, "max_position_embeddings": positions, **fields}})
    return spec, spec.hf_config("tiny")


def test_the_counted_tables_are_the_ones_the_built_model_holds():
    import torch

    from rooflint.models.base import build

    spec, config = _spec(64)
    weights = build(spec, "tiny", torch.bfloat16, torch.device("cpu")).weights
    held, scratch = spec.rope_table_bytes(config, 2)
    assert held == weights.cos.nbytes + weights.sin.nbytes == 2 * 64 * 16 * 2  # [positions, head_dim] in bf16
    assert scratch > held  # built in fp32 before they are rounded
    # FlashInfer's set keeps an fp32 copy of them: 4 bytes more per element
    assert spec.rope_table_bytes(config, 2, fp32_cache=True)[0] == held + 64 * 16 * 4
    # longrope past its original length keeps a second pair (its long factors)
    long_rope = {"rope_type": "longrope", "long_factor": [1.5] * 8, "short_factor": [1.0] * 8,
                 "original_max_position_embeddings": 32}  # fmt: skip
    spec, config = _spec(128, rope_scaling=long_rope)
    assert spec.rope_table_bytes(config, 2)[0] == 2 * (2 * 128 * 16 * 2)


def test_a_config_of_sane_positions_passes_the_check(tmp_path):
    """64 positions (the tiny Llama's own): the check passes, and the bytes the built model holds,
    which the decode sweep plans with, are its weights and its tables."""
    import torch

    from rooflint.models import memory
    from rooflint.models.model_run import preflight
    from rooflint.models.outcome import ModelRequest

    spec, config = _spec(64)
    request = ModelRequest(model="llama", model_spec=spec, config="tiny", batch=1, seq=8, prompt=4, new_tokens=2,
                           kernels=["eager"], out=tmp_path, device="cpu")  # fmt: skip
    held = spec.rope_table_bytes(config, 2)[0]
    assert preflight(request, spec, torch.device("cpu"), copies=1) == memory.parameter_bytes(spec, config, 2) + held


def test_tables_that_fit_alone_are_still_counted_in_the_whole_run(monkeypatch, tmp_path):
    """Tables that leave the weights room, but not the run's KV cache and activations as well: the
    refusal check_fits makes names them among what the run needs."""
    import torch

    from rooflint.models import memory
    from rooflint.models.model_run import preflight
    from rooflint.models.outcome import ModelRequest

    positions = 1 << 20
    spec, config = _spec(positions)
    weights = memory.parameter_bytes(spec, config, 2)
    held, scratch = spec.rope_table_bytes(config, 2)
    monkeypatch.setattr(memory, "free_bytes", lambda device: int((weights + held + scratch + 1) / memory.HEADROOM))
    request = ModelRequest(model="llama", model_spec=spec, config="tiny", batch=1, seq=8, prompt=4, new_tokens=2,
                           kernels=["eager"], out=tmp_path, device="cpu")  # fmt: skip
    with pytest.raises(UserError) as refused:
        preflight(request, spec, torch.device("cpu"), copies=1)
    assert f"RoPE tables {(held + scratch) / memory.GB:.3g})" in str(refused.value)
    assert "lower --batch or --seq" in str(refused.value)


# ---------------------------------------------------------------- the CPU's name in the gpu column

LATER = "2026-11-21T10:00:00+00:00"


def _cpu_rows(gpu_of_softmax: str, timestamp: str) -> list:
    """A CPU run's two rows, each under its roof (the CPU spec's 20 GB/s), the softmax one's gpu as given."""
    return [
        row("vector_add", "eager", 200.0, gpu="cpu", spec=CPU, timestamp=timestamp),
        row("softmax", "eager", 20.0, gpu=gpu_of_softmax, spec=CPU, cost=SOFTMAX_BF16, shape="rows=4096,cols=8192",
            timestamp=timestamp),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def readers(tmp_path_factory) -> tuple[Path, dict[str, subprocess.CompletedProcess]]:
    """merge, report, roofline and lint on a run whose softmax row says "CPU", the others "cpu"."""
    root = tmp_path_factory.mktemp("cpu_spelt_two_ways")
    first = write(_cpu_rows("cpu", "2026-11-20T10:00:00+00:00"), root / "first")
    edited = write(_cpu_rows("CPU", LATER), root / "edited")
    commands = {
        "merge": ["merge", first, edited, "--out", root / "merged.csv"],
        "report": ["report", edited, "--format", "json"],
        "roofline": ["roofline", edited, "--out", root / "plots"],
        "lint": ["lint", edited],
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = pool.map(lambda argv: run_in(root, *argv), commands.values())
        return root, dict(zip(commands, done))


@needs_console_script
def test_merge_reads_cpu_and_CPU_as_one_gpu(readers):
    root, done = readers
    merge = done["merge"]
    assert merge.returncode == 0, merge.stderr
    assert "(GPUs: cpu)" in merge.stderr and "dropped 2 duplicate rows" in merge.stderr
    merged = pd.read_csv(root / "merged.csv")
    assert len(merged) == 2 and set(merged["gpu"]) == {"cpu"}


@needs_console_script
def test_report_and_roofline_draw_one_cpu(readers):
    root, done = readers
    report = done["report"]
    assert report.returncode == 0, report.stderr
    payload = json.loads(report.stdout)
    assert [g["gpu"] for g in payload["gpus"]] == ["cpu"] and payload["across_gpus"] == []
    assert done["roofline"].returncode == 0, done["roofline"].stderr
    assert sorted(p.name for p in (root / "plots").iterdir()) == ["roofline.csv", "roofline.png", "roofline.svg"]


@needs_console_script
def test_lint_judges_a_CPU_row_on_its_own_cpu(readers):
    _, done = readers
    lint = done["lint"]
    assert "wrong_gpu" not in lint.stdout + lint.stderr
    assert lint.returncode == 0, lint.stdout + lint.stderr
