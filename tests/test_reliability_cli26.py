"""`rooflint model` and `rooflint ab` given odd input, run as a user runs them (the installed console
script in a subprocess). Each case is a bug found that way:

- a config.json whose head dim is odd and at most 4 (head_dim 3, or hidden_size / heads = 1): transformers
  refuses an odd head only above 4, so the run crashed in HF's RoPE (exit 1, a RuntimeError) or
  reported the eager set as an error row (an IndexError in the cache append);
- `model --out LINK`, LINK a symlink to a folder that does not exist: the model was built and HF's
  reference computed, then "cannot write to output directory LINK: File exists";
- `ab --csv LINK`, LINK a symlink to a file not written yet: the writability probe unlinked the
  link, left an empty file where it pointed, and the table was written where the link had been;
- `model llama --weights DIR`: "building llama llama-3.2-1b" named the preset the name defaults to, not
  the checkpoint that loads, and a DIR holding a config.json but no weight file was refused by
  from_pretrained after that line (two lines for one bad flag).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from console_script import assert_refused, needs_console_script, run_in

SMALL_MODEL = ("--device", "cpu", "--dtype", "fp32", "--batch", "1", "--seq", "8", "--prompt", "4", "--new-tokens", "2")
SMALL_AB = ("--size", "rows=4,cols=64", "--device", "cpu", "--regime", "burst", "--rounds", "2")
TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 256,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}


@needs_console_script
@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"head_dim": 3}, "head_dim=3 is odd"),  # before: exit 1, RuntimeError in HF's apply_rotary_pos_emb
        (
            {"num_attention_heads": 64, "num_key_value_heads": 64},  # before: exit 1, the eager set an error row
            "hidden_size=64 over num_attention_heads=64 gives head_dim 1, which is odd",
        ),
    ],
)
def test_a_config_with_an_odd_head_dim_is_refused(tmp_path: Path, fields: dict, expected: str) -> None:
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps({**TINY_LLAMA, **fields}))
    done = run_in(tmp_path, "model", "odd/config.json", *SMALL_MODEL, "--no-plots", "--out", "out")
    assert_refused(done, "odd/config.json: ", expected, "valid: an even head_dim")
    assert not (tmp_path / "out").exists()


@needs_console_script
def test_model_out_a_dangling_link_is_refused_before_the_model_is_built(tmp_path: Path) -> None:
    """Before: "building gpt2 ...", "HF eager reference ...", then exit 2 with "File exists"."""
    (tmp_path / "out").symlink_to(tmp_path / "scratch" / "run1")
    done = run_in(tmp_path, "model", "gpt2", *SMALL_MODEL, "--layers", "1", "--no-plots", "--out", "out")
    assert_refused(done, "output directory out: it is a symbolic link to", "which does not exist")
    assert "building" not in done.stderr
    assert (tmp_path / "out").is_symlink() and not (tmp_path / "scratch").exists()


@needs_console_script
def test_ab_csv_through_a_dangling_link_writes_where_the_link_points(tmp_path: Path) -> None:
    """Before: ab.csv became a plain file and latest.csv an empty one, the link gone."""
    (tmp_path / "ab.csv").symlink_to("latest.csv")
    done = run_in(tmp_path, "ab", "softmax", "-V", "eager,eager_unfused", *SMALL_AB, "--csv", "ab.csv")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "ab.csv").is_symlink()
    lines = (tmp_path / "latest.csv").read_text().splitlines()
    assert lines[0].startswith("shape,regime,entry,") and len(lines) == 3, lines


@needs_console_script
def test_a_checkpoint_folder_without_weights_is_refused_in_one_line(tmp_path: Path) -> None:
    """Before: "building llama llama-3.2-1b (bf16, cpu)", then from_pretrained's "no file named ..."."""
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(TINY_LLAMA))
    done = run_in(tmp_path, "model", "llama", "--weights", "ckpt", "--device", "cpu", "--out", "out")
    assert_refused(done, "--weights ckpt holds no weight file", "save_pretrained checkpoint directory")
    assert not (tmp_path / "out").exists()
