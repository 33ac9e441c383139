"""`rooflint model NAME --weights DIR` judged on the checkpoint's own config.json before any weight is
loaded, as a config given by name or path is judged before it is built. Each case was found so:

- a checkpoint whose max_position_embeddings is enormous was loaded (minutes for a large one) and
  then failed allocating its RoPE cos/sin tables (one row per position), exit 1, where the same
  config given as a path was refused in one line;
- a --seq past the checkpoint's positions was refused only once it had loaded, after "building";
- a config.json that is not JSON, not an object, missing, or a field transformers refuses was
  read first by from_pretrained, after "building" (a GPT-2 checkpoint's), or crashed with exit 1;
- a reduced-precision run's fp32 reference copy computes its own RoPE tables, in fp32 and whole
  however few layers the copy keeps: neither the preflight nor the copy's sizing counted them.

The user-visible behaviour is driven through the installed console script, as a user runs it.

Last, a bench stopped between creating results.csv and writing its header (a Ctrl-C under load, as
CI's test_reliability_cli6 met it) left an empty results.csv, which the next run moved over the last
measured run's results.prev.csv: keep_previous now takes an empty file, or the start of the header,
for no run's results.
"""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from console_script import assert_refused, needs_console_script, run_in
from tiny_llama import TINY_GPT2, TINY_LLAMA, checkpoint_root, edited, with_config

from rooflint.core.errors import UserError

HUGE = 10**12
# One worker runs the module: its checkpoints and the eight `rooflint model` runs are built once, not on each.
pytestmark = pytest.mark.xdist_group("cli30_checkpoints")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    """A tiny Llama and a tiny GPT-2 saved with save_pretrained, and copies with another config.json."""
    root, transformers = checkpoint_root(tmp_path_factory, "checkpoints")
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY_LLAMA)).save_pretrained(root / "llama")
    gpt2 = transformers.GPT2Config(**TINY_GPT2)
    transformers.GPT2LMHeadModel(gpt2).save_pretrained(root / "gpt2")
    edited(root, "llama", "huge", max_position_embeddings=HUGE)
    edited(root, "llama", "string_positions", max_position_embeddings="many")
    with_config(root, "gpt2", "gpt2_not_json", "{not json")
    with_config(root, "gpt2", "gpt2_a_list", "[1, 2]")
    shutil.copytree(root / "gpt2", root / "gpt2_no_config")
    (root / "gpt2_no_config" / "config.json").unlink()
    return root


# id -> (the model and --weights, --seq): each run once, two at a time (a Python importing torch)
RUNS = {
    "normal": (["llama", "--weights", "llama"], 8),
    "huge": (["llama", "--weights", "huge"], 8),
    "huge_by_path": (["llama/config.json", "--weights", "huge"], 8),
    "past_positions": (["llama", "--weights", "llama"], 100),
    "string_positions": (["llama", "--weights", "string_positions"], 8),
    "gpt2_not_json": (["gpt2", "--weights", "gpt2_not_json"], 8),
    "gpt2_a_list": (["gpt2", "--weights", "gpt2_a_list"], 8),
    "gpt2_no_config": (["gpt2", "--weights", "gpt2_no_config"], 8),
}


@pytest.fixture(scope="module")
def runs(checkpoints) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    def one(name: str) -> tuple[subprocess.CompletedProcess, Path]:
        arguments, seq = RUNS[name]
        out = checkpoints / "out" / name
        flags = ["--device", "cpu", "--batch", "1", "--seq", seq, "--prompt", "4", "--new-tokens", "2", "--no-plots"]
        return run_in(checkpoints, "model", *arguments, *flags, "--out", out), out

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(RUNS, pool.map(one, RUNS)))


# ---------------------------------------------------------------- the checkpoint's RoPE tables and positions


@needs_console_script
@pytest.mark.parametrize("name", ["huge", "huge_by_path"])
def test_a_checkpoint_whose_rope_tables_cannot_fit_is_refused_before_it_loads(runs, name):
    """Before: "building --weights huge (bf16, cpu)", then the allocator's "can't allocate memory"
    for 4 TB, exit 1; the same config given as a path was refused in one line."""
    done, out = runs[name]
    # one line and no "building" line: refused before a weight was read
    assert_refused(done, f"huge/config.json: max_position_embeddings={HUGE}", "RoPE cos/sin tables",
                   "valid: max_position_embeddings of at most")  # fmt: skip
    assert not out.exists()


@needs_console_script
def test_a_seq_past_the_checkpoints_positions_is_refused_before_it_loads(runs):
    """The checkpoint's 64 positions, not its name's preset's (llama-3.2-1b's 131072)."""
    done, out = runs["past_positions"]
    assert_refused(done, "llama/config.json has 64 positions", "--seq (100)", "must each fit")
    assert not out.exists()


@needs_console_script
def test_a_normal_checkpoint_still_runs_judged_on_its_own_config(runs, checkpoints, tmp_path):
    """The checks pass a checkpoint that fits, and the run goes on to load and measure it. What they
    count is the checkpoint's own model (its weights and RoPE tables, the bytes the decode sweep
    plans with): 0 with --weights before, whatever the checkpoint."""
    import torch
    from transformers import AutoConfig

    from rooflint.models import llama, memory
    from rooflint.models.model_run import preflight
    from rooflint.models.outcome import ModelRequest

    done, out = runs["normal"]
    everything = done.stdout + done.stderr
    assert done.returncode == 0, everything
    assert "building --weights llama (bf16, cpu)" in everything and "Traceback" not in everything
    assert (out / "results.csv").exists()
    request = ModelRequest(model="llama", config="llama-3.2-1b", batch=1, seq=8, prompt=4, new_tokens=2,
                           kernels=["eager"], out=tmp_path, device="cpu", weights=checkpoints / "llama")  # fmt: skip
    config = AutoConfig.from_pretrained(checkpoints / "llama")
    held = llama.SPEC.rope_table_bytes(config, 2)[0]
    assert held == 2 * 64 * 16 * 2  # cos and sin, [64 positions, head_dim 16] in bf16: not the preset's 131072
    expected = memory.parameter_bytes(llama.SPEC, config, 2) + held
    assert preflight(request, llama.SPEC, torch.device("cpu"), copies=1) == expected


# ---------------------------------------------------------------- a malformed config.json


@needs_console_script
@pytest.mark.parametrize(
    "name, expected",
    [
        ("gpt2_not_json", ["gpt2_not_json/config.json is not a JSON config", "line 1 column 2"]),
        ("gpt2_a_list", ["gpt2_a_list/config.json is not a Hugging Face config", "JSON object with model_type"]),
        ("gpt2_no_config", ["--weights gpt2_no_config holds no readable config.json", "valid: a save_pretrained"]),
        ("string_positions", ["string_positions/config.json is not a config transformers accepts",
                              "max_position_embeddings", "expected int"]),
    ],
)  # fmt: skip
def test_a_checkpoint_with_a_malformed_config_is_refused_in_one_line(runs, name, expected):
    """Before: "building --weights DIR", then from_pretrained's own error (exit 2, two lines), a
    TypeError or transformers' StrictDataclassFieldValidationError (exit 1)."""
    done, out = runs[name]
    assert_refused(done, *expected)
    assert not out.exists()


# ---------------------------------------------------------------- the fp32 reference copy's tables


def _spec(positions: int):
    pytest.importorskip("transformers", reason="the model specs need transformers")
    from rooflint.models import llama

    spec = llama.Llama({"tiny": {**TINY_LLAMA, "max_position_embeddings": positions}})
    return spec, spec.hf_config("tiny")


def test_a_config_whose_fp32_reference_tables_cannot_fit_is_refused_in_one_line(monkeypatch, tmp_path):
    """Room for the bf16 run, its own tables included, but not for the fp32 copy's tables beside
    them: a bf16 run is refused naming max_position_embeddings; an fp32 run (no copy) is not."""
    import torch

    from rooflint.models import memory
    from rooflint.models.model_run import preflight
    from rooflint.models.outcome import ModelRequest

    positions = 1 << 20
    spec, config = _spec(positions)
    weights = memory.parameter_bytes(spec, config, 2)
    held, scratch = spec.rope_table_bytes(config, 2)
    fp32_held, fp32_scratch = spec.rope_table_bytes(config, 4)
    assert held + fp32_held + fp32_scratch > held + scratch + (1 << 20)  # the copy's tables are the larger
    # the bf16 run's whole need (its KV cache and activations are kilobytes) with a megabyte to spare
    monkeypatch.setattr(
        memory, "free_bytes", lambda device: int((weights + held + scratch + (1 << 20)) / memory.HEADROOM)
    )

    def request(dtype: str) -> ModelRequest:
        return ModelRequest(model="llama", model_spec=spec, config="tiny", batch=1, seq=8, prompt=4, new_tokens=2,
                            dtype=dtype, kernels=["eager"], out=tmp_path, device="cpu")  # fmt: skip

    with pytest.raises(UserError) as refused:
        preflight(request("bf16"), spec, torch.device("cpu"), copies=1)
    text = str(refused.value)
    assert f"tiny: max_position_embeddings={positions} needs" in text
    assert "(one row per position, the fp32 reference copy's included)" in text
    assert "valid: max_position_embeddings of at most" in text and "\n" not in text
    # the fp32 run's own tables are twice the bf16 ones': give it their room, and it has no copy
    monkeypatch.setattr(
        memory, "free_bytes", lambda device: int((2 * weights + 2 * held + scratch + (1 << 20)) / memory.HEADROOM)
    )
    preflight(request("fp32"), spec, torch.device("cpu"), copies=1)


def test_the_fp32_copy_is_sized_with_its_tables():
    """Room for every fp32 layer but not for the copy's fp32 tables as well: fewer layers, or none
    (the note's "checked against HF in the same dtype"), instead of a copy that fails allocating."""
    import torch

    from rooflint.models import memory
    from rooflint.models.base import build
    from rooflint.models.kernel_set_run import fp32_layers

    spec, config = _spec(4096)
    loaded = build(spec, "tiny", torch.bfloat16, torch.device("cpu"))
    total = memory.parameter_bytes(spec, config, 4)
    activations = memory.prefill_activation_bytes(loaded.dims, 1, 8, 4)
    held, scratch = spec.rope_table_bytes(config, 4)
    assert held + scratch > total  # 4096 positions: the tables outweigh the tiny model
    without_tables = int((total + activations) / memory.HEADROOM) + 1
    assert fp32_layers(loaded, 1, 8, without_tables) == 0
    assert fp32_layers(loaded, 1, 8, int((total + activations + held + scratch) / memory.HEADROOM) + 1) == 2


@pytest.mark.parametrize("stopped", ["", "family,variant,ki", "\n\n"])
def test_a_results_csv_left_empty_by_a_run_stopped_at_its_start_never_replaces_the_last_results(tmp_path, stopped):
    """A run stopped after creating results.csv and before its header was written (a Ctrl-C under
    load) left it empty; the next run moved that over results.prev.csv and the last measured run's
    rows were gone. An empty file, or one holding the start of the header, is no run's results."""
    from rooflint.engine.bench import keep_previous

    measured = "family,variant\nvector_add,eager\n"
    (tmp_path / "results.prev.csv").write_text(measured)
    (tmp_path / "results.csv").write_text(stopped)
    keep_previous(tmp_path)
    assert (tmp_path / "results.prev.csv").read_text() == measured
    assert not (tmp_path / "results.csv").exists()


def test_a_results_csv_with_rows_still_becomes_the_previous_results(tmp_path):
    from rooflint.engine.bench import keep_previous
    from rooflint.outputs.results import COLUMNS

    last = ",".join(COLUMNS) + "\n" + ",".join(["x"] * len(COLUMNS)) + "\n"
    (tmp_path / "results.prev.csv").write_text("older\n")
    (tmp_path / "results.csv").write_text(last)
    keep_previous(tmp_path)
    assert (tmp_path / "results.prev.csv").read_text() == last
    assert not (tmp_path / "results.csv").exists()
