"""ab, profile and model, run as a user runs them: the installed console script in a subprocess.
Each case is a bug found that way: a --source that exits at import ending the A/B with its own exit
code, a config.json transformers refuses crashing `model` with exit 1, a later shape whose inputs
or reference raised losing the A/B's rounds timed before it, a --size too big for memory reaching
the allocator in `ab` and `profile`.
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest
from console_script import ROOFLINT, assert_refused, needs_console_script, run_in

import rooflint.kernels.attention as attention_module
import rooflint.kernels.softmax as softmax_module

pytestmark = needs_console_script

HUGE = "rows=100000000,cols=100000000"  # 4e16 bytes of bf16 inputs and outputs: no machine has them


def rooflint(*argv, tmp_path: Path) -> subprocess.CompletedProcess:
    return run_in(tmp_path, *argv)


@pytest.mark.parametrize("exit_call", ["sys.exit()", "sys.exit(3)"])
def test_ab_source_that_exits_at_import_is_refused(tmp_path, exit_call):
    # sys.exit() at import is a SystemExit, which the import's `except Exception` let through: the
    # A/B ended with the file's code (0 for sys.exit()) and no word, nothing timed.
    (tmp_path / "exits.py").write_text(f"import sys\n{exit_call}\n")
    done = rooflint(
        "ab", "softmax", "-V", "eager", "--source", "exits.py", "--source", softmax_module.__file__,
        "--device", "cpu", "--size", "small", "--rounds", "2", tmp_path=tmp_path,
    )  # fmt: skip
    assert_refused(done, "--source exits.py", "exits at import")


TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "rope_theta": 10000.0,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "hidden_act": "silu",
}  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"rms_norm_eps": "abc"}, "rms_norm_eps"),  # transformers' strict config: a TypeError, exit 1
        ({"head_dim": 15}, "head_dim"),  # RoPE needs an even head_dim: a ValueError, exit 1
        ({"rope_scaling": {"rope_type": "linear"}}, "factor"),  # linear without its factor: a KeyError
        ({"torch_dtype": "float99"}, "float99"),  # an AttributeError from torch
        ({"rope_theta": "x"}, "rope_theta"),  # a TypeError deep in the build
        ({"rope_theta": -1.0}, "rope_theta"),  # built and run: every logit NaN, the check failed
    ],
)
def test_model_config_fields_that_cannot_build_are_refused(tmp_path, fields, named):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**TINY_LLAMA, **fields}))
    done = rooflint(
        "model", folder / "config.json", "--batch", "1", "--seq", "16", "--prompt", "8", "--new-tokens", "2",
        "--dtype", "fp32", "--device", "cpu", "--no-plots", "--out", tmp_path / "out", tmp_path=tmp_path,
    )  # fmt: skip
    assert_refused(done, named)


def test_ab_keeps_the_rounds_of_earlier_shapes_when_a_later_shape_raises(tmp_path):
    # attention's small size is two shapes. A copy whose float64 reference raises at the second one
    # (as an out-of-memory reference at a large shape does) ended the A/B with a crash: the first
    # shape's rounds, timed, were neither printed nor written to --csv. Burst only: the reference is
    # judged before either regime is timed, and the sustained regime's CPU heat-up (2 s an entry a
    # round) was 8 s of this run's 14 s of CPU.
    source = Path(attention_module.__file__).read_text()
    header = "def reference(inputs, params):\n"
    assert header in source
    raising = "    if params['causal']:\n        raise MemoryError('the float64 reference does not fit')\n"
    (tmp_path / "attn_copy.py").write_text(source.replace(header, header + raising, 1))
    done = rooflint(
        "ab", "attention", "-V", "eager", "--source", attention_module.__file__, "--source", "attn_copy.py",
        "--device", "cpu", "--size", "small", "--rounds", "2", "--regime", "burst", "--csv", "ab.csv",
        tmp_path=tmp_path,
    )  # fmt: skip
    everything = done.stdout + done.stderr
    assert done.returncode == 1, everything  # an entry failed at a shape: exit 1, as a failed check
    assert "Traceback" not in everything
    assert "the float64 reference does not fit" in done.stdout
    with open(tmp_path / "ab.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["shape"] for row in rows} == {"B=1,H=2,N=130,D=64,causal=0"}
    assert {row["entry"] for row in rows} == {"eager@__init__.py", "eager@attn_copy.py"}


@pytest.mark.parametrize(
    "command",
    [
        ("ab", "softmax", "-V", "eager,eager_unfused", "--rounds", "2"),  # crashed: the allocator's error, exit 1
        ("profile", "softmax", "-V", "eager", "--out", "out"),  # an errored row and exit 1
    ],
)
def test_a_size_too_big_for_memory_is_refused_before_anything_runs(tmp_path, command):
    done = rooflint(*command, "--size", HUGE, "--device", "cpu", tmp_path=tmp_path)
    assert_refused(done, "GB for its inputs and outputs", "pick a smaller --size")


def test_profile_refuses_an_empty_dtype_or_size_rather_than_the_default(tmp_path):
    # `--dtype "$DTYPE"` with DTYPE unset profiled bf16 and said nothing: the caller meant another dtype.
    for option, expected in (("--dtype", "has no dtype ''"), ("--size", "size")):
        done = subprocess.run(
            [ROOFLINT, "profile", "softmax", option, "", "--device", "cpu", "--out", str(tmp_path / "p")],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert_refused(done, expected)
    assert not (tmp_path / "p" / "kernels.csv").exists()
