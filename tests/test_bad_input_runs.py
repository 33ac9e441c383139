"""Bad input that the commands which run things once took silently or answered with a crash: each
case runs the installed `rooflint` console script in a subprocess, as a user does, and must get one
error line, exit code 2, no traceback, and nothing measured.

An option given with nothing in it (`-V ,`, an empty shell variable) must not quietly mean the
default; a size key given twice must not quietly run the last value; a model config.json that is
not text, lacks the fields that size the model or sizes it impossibly must be refused before
anything is built, not crash in transformers or torch.
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from console_script import ROOFLINT, assert_refused, needs_console_script

pytestmark = [
    needs_console_script,
    pytest.mark.xdist_group("bad_input_runs"),
]

TINY = {
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5, "hidden_act": "silu",
}  # fmt: skip
# name -> the config.json's contents (bytes: written as they are)
CONFIGS = {
    "binary": bytes(range(255, 0, -1)),
    "no_sizes": json.dumps({"model_type": "llama"}).encode(),
    "negative": json.dumps({**TINY, "hidden_size": -64}).encode(),
    "text_size": json.dumps({**TINY, "hidden_size": "abc"}).encode(),
    "no_layers": json.dumps({**TINY, "num_hidden_layers": 0}).encode(),
    "kv_heads": json.dumps({**TINY, "num_key_value_heads": 3}).encode(),
    "heads": json.dumps({**TINY, "num_attention_heads": 3, "num_key_value_heads": 1}).encode(),
}
MODEL = ["--device", "cpu", "--batch", "1", "--seq", "8", "--prompt", "4", "--new-tokens", "2", "--no-plots"]

# (id, arguments, what stderr must say). CONFIG:<name> is the path of that config file.
CASES = [
    ("bench_size_key_twice", ["bench", "vector_add", "--size", "n=4096,n=8192"], ["size key n is given twice"]),
    ("profile_size_key_twice", ["profile", "softmax", "--size", "rows=3,rows=4"], ["size key rows is given twice"]),
    ("ab_size_key_twice", ["ab", "softmax", "-V", "eager,eager_unfused", "--size", "rows=3,rows=4"], ["twice"]),
    # A grouped-query size whose kv heads do not divide the query heads: every variant's inputs
    # failed in its worker, so each row read "crashed" and the run exited 1.
    (
        "bench_decode_attention_groups",
        ["bench", "decode_attention", "--size", "h=4,h_kv=3"],
        ["h_kv must divide h", "h=4, h_kv=3"],
    ),
    ("bench_scheduler_empty", ["bench", "vector_add", "--scheduler", ""], ["--scheduler ''", "valid: local"]),
    # Refused after the output folder was proved writable: no empty folder is left behind either.
    ("bench_unknown_family", ["bench", "nosuch"], ["unknown family 'nosuch'"]),
    (
        "bench_junit_over_results",
        ["bench", "vector_add", "--junit", "out/results.csv"],
        ["is the run's own results.csv"],
    ),
    ("bench_devices_empty", ["bench", "vector_add", "--devices", ","], ["--devices ','", "e.g. 0,1"]),
    ("bench_gpu_types_empty", ["bench", "vector_add", "--gpu-types", ""], ["--gpu-types ''", "names nothing"]),
    ("ab_regime_empty", ["ab", "softmax", "-V", "eager,eager_unfused", "--regime", ","], ["--regime ','", "burst"]),
    ("profile_variants_empty", ["profile", "softmax", "-V", ","], ["--variants ','", "names nothing"]),
    ("model_kernels_empty", ["model", "gpt2", "--layers", "1", "--kernels", ",", *MODEL], ["--kernels ','", "eager"]),
    ("model_batch_twice", ["model", "gpt2", "--layers", "1", *MODEL[:2], "--batch", "1,1"], ["names 1 twice"]),
    ("model_config_binary", ["model", "CONFIG:binary", *MODEL], ["is not a JSON config"]),
    (
        "model_config_no_sizes",
        ["model", "CONFIG:no_sizes", "--layers", "1", *MODEL],
        ["hidden_size must be a positive integer"],
    ),
    ("model_config_negative", ["model", "CONFIG:negative", *MODEL], ["hidden_size must be a positive"]),
    ("model_config_text_size", ["model", "CONFIG:text_size", *MODEL], ["hidden_size must be a positive"]),
    ("model_config_no_layers", ["model", "CONFIG:no_layers", *MODEL], ["num_hidden_layers must be a positive"]),
    ("model_config_kv_heads", ["model", "CONFIG:kv_heads", *MODEL], ["num_key_value_heads=3 must divide"]),
    ("model_config_heads", ["model", "CONFIG:heads", *MODEL], ["hidden_size=64 must be a multiple"]),
]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """Every case once, two at a time (each is a Python starting and importing torch)."""
    root = tmp_path_factory.mktemp("explore_inputs")
    for name, content in CONFIGS.items():
        (root / f"{name}.json").write_bytes(content)
    env = dict(os.environ, ROOFLINT_CACHE=str(root / "cache"), COLUMNS="200")
    env.pop("ROOFLINT_DEBUG", None)

    def one(case) -> tuple[subprocess.CompletedProcess, Path]:
        name, arguments, _ = case
        out = root / name / "out"
        out.parent.mkdir()
        argv = [str(root / f"{a.split(':', 1)[1]}.json") if a.startswith("CONFIG:") else a for a in arguments]
        argv += ["--out", str(out)] if argv[0] != "ab" else []
        argv += [] if "--device" in argv else ["--device", "cpu"]
        done = subprocess.run(
            [ROOFLINT, *argv], capture_output=True, text=True, timeout=300, cwd=out.parent, env=env, check=False
        )
        return done, out

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip([case[0] for case in CASES], pool.map(one, CASES)))


@pytest.mark.parametrize("name, expected", [(case[0], case[2]) for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_one_line_and_exit_2(outcomes, name, expected):
    done, out = outcomes[name]
    assert_refused(done, *expected)  # one line: no "building", no log
    if name.startswith("bench_"):
        assert not out.exists()  # not even an empty --out folder
    assert not (out / "results.csv").exists()  # nothing was measured
