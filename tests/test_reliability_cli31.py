"""A GPT-2 checkpoint whose n_positions cannot fit is refused naming n_positions, as a Llama config's
max_position_embeddings is. GPT-2's positions are a learned table among its weights ([n_positions,
n_embd], wpe): a --weights checkpoint of 10**12 positions was refused by the memory check with
"lower --batch or --seq", which no --batch or --seq could satisfy.

The user-visible behaviour is driven through the installed console script, as a user runs it.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from console_script import assert_refused, needs_console_script, run_in
from tiny_llama import TINY_GPT2, checkpoint_root, edited

from rooflint.core.errors import UserError

HUGE = 10**12
# One worker runs the module: its checkpoint and the two `rooflint model` runs are made once, not on each.
pytestmark = pytest.mark.xdist_group("cli31_checkpoints")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    """A tiny GPT-2 saved with save_pretrained, and a copy whose config.json has 10**12 positions."""
    root, transformers = checkpoint_root(tmp_path_factory, "gpt2_checkpoints")
    transformers.GPT2LMHeadModel(transformers.GPT2Config(**TINY_GPT2)).save_pretrained(root / "gpt2")
    edited(root, "gpt2", "huge", n_positions=HUGE)
    return root


# id -> the model and its arguments: each run once, two at a time (a Python importing torch)
RUNS = {
    "normal": ["gpt2", "--weights", "gpt2"],
    "huge": ["gpt2", "--weights", "huge"],
}


@pytest.fixture(scope="module")
def runs(checkpoints) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    def one(name: str) -> tuple[subprocess.CompletedProcess, Path]:
        out = checkpoints / "out" / name
        flags = ["--device", "cpu", "--batch", "1", "--seq", "8", "--prompt", "4", "--new-tokens", "2", "--no-plots",
                 "--kernels", "eager"]  # fmt: skip
        return run_in(checkpoints, "model", *RUNS[name], *flags, "--out", out), out

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(RUNS, pool.map(one, RUNS)))


@needs_console_script
def test_a_gpt2_checkpoint_whose_position_table_cannot_fit_is_refused_naming_n_positions(runs):
    """Before: "... lower --batch or --seq", exit 2, whatever --batch and --seq were. (A GPT-2
    config.json by path is refused as an architecture of built-in presets only.)"""
    done, out = runs["huge"]
    assert_refused(done, f"huge/config.json: n_positions={HUGE}", "learned position embeddings",
                   "valid: n_positions of at most")  # fmt: skip
    assert "--batch" not in done.stderr
    assert not out.exists()


@needs_console_script
def test_a_gpt2_checkpoint_that_fits_still_runs(runs):
    done, out = runs["normal"]
    everything = done.stdout + done.stderr
    assert done.returncode == 0, everything
    assert "Traceback" not in everything and (out / "results.csv").exists()


def test_the_most_positions_it_names_fit_and_a_thousand_more_do_not():
    """The largest n_positions the refusal names passes the same check; the table grows by a row a
    position."""
    import torch

    from rooflint.models import memory

    cpu, row, others, free = torch.device("cpu"), 64 * 2, 10**6, 10**8
    with pytest.raises(UserError, match=r"n_positions of at most (\d+) here") as refused:
        memory.check_position_table("gpt2", "n_positions", HUGE, HUGE * row, others, free, cpu)
    most = int(refused.value.args[0].rsplit("at most ", 1)[1].split()[0])
    assert 0 < most < HUGE
    memory.check_position_table("gpt2", "n_positions", most, most * row, others, free, cpu)  # fits: no error
    with pytest.raises(UserError):
        memory.check_position_table("gpt2", "n_positions", most + 1000, (most + 1000) * row, others, free, cpu)


def test_where_the_other_weights_alone_cannot_fit_the_memory_check_says_so():
    """No budget left beside the other weights: the position table is not the culprit to name."""
    import torch

    from rooflint.models import memory

    memory.check_position_table("gpt2", "n_positions", HUGE, HUGE * 128, 10**12, 10**8, torch.device("cpu"))


def test_gpt2_counts_its_learned_positions_and_llama_none():
    transformers = pytest.importorskip("transformers")
    GPT2Config, LlamaConfig = transformers.GPT2Config, transformers.LlamaConfig

    from rooflint.models import gpt2, llama

    config = GPT2Config(n_embd=64, n_layer=1, n_head=4, n_positions=100)
    assert gpt2.SPEC.position_parameter_bytes(config, 2) == 100 * 64 * 2
    assert gpt2.SPEC.positions_field == "n_positions"
    assert llama.SPEC.position_parameter_bytes(LlamaConfig(), 2) == 0
    assert llama.SPEC.positions_field == "max_position_embeddings"
