"""`rooflint model` inputs that were refused late, ignored, or loaded as something else: each case runs
the installed `rooflint` console script in a subprocess, as a user does.

- flags that name a file, folder or GPU (--out, --spec-file, --gpu, --weights with --layers) are
  judged before anything is built: they were refused after the "building" line and HF's reference,
  or on a CPU not at all;
- an unknown rope_type is one line, not transformers' warning line and then rooflint's;
- a --weights checkpoint that is not the model (int8 tensors, a broken safetensors file, another
  architecture, a missing or mis-shaped tensor) is refused in one line: it was loaded with random or
  integer-cast values (exit 0), crashed with exit 1, or, a gpt2 checkpoint read as a Llama config,
  built Llama-2-7B's shape until the OOM killer came;
- a Ctrl-C in a decode sweep keeps the points measured so far (they were written only at its end).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cpu_ceilings
import pytest
from console_script import ROOFLINT, assert_refused, needs_console_script

pytestmark = [needs_console_script, pytest.mark.xdist_group("model_cli_inputs")]

TINY = {
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 128,
    "rms_norm_eps": 1e-5, "hidden_act": "silu",
}  # fmt: skip
RUN = ["--device", "cpu", "--batch", "1", "--seq", "8", "--prompt", "4", "--new-tokens", "2", "--no-plots"]

# (id, arguments after `rooflint model`, what stderr must say). DIR:<name> is a file or folder of the
# fixture; OUT is the case's own --out. Each is refused before anything is printed.
REFUSED = [
    ("out_is_a_file", ["gpt2", "--layers", "1", *RUN, "--out", "DIR:a_file"], ["cannot write to output directory"]),
    ("unknown_gpu", ["gpt2", "--layers", "1", *RUN, "--gpu", "nosuch", "--out", "OUT"], ["unknown GPU 'nosuch'"]),
    (
        "missing_spec_file",
        ["gpt2", "--layers", "1", *RUN, "--spec-file", "DIR:nosuch.toml", "--out", "OUT"],
        ["spec file", "does not exist"],
    ),
    (
        "weights_with_layers",
        ["llama-3.2-1b", "--layers", "1", *RUN, "--weights", "DIR:good", "--out", "OUT"],
        ["cannot shorten a loaded checkpoint"],
    ),
    ("unknown_rope_type", ["DIR:banana_rope", *RUN, "--out", "OUT"], ["rope_type='banana'", "valid: default"]),
    ("int8_weights", ["llama-3.2-1b", *RUN, "--weights", "DIR:int8", "--out", "OUT"], ["is I8", "valid: a float"]),
    (
        "broken_safetensors",
        ["llama-3.2-1b", *RUN, "--weights", "DIR:broken", "--out", "OUT"],
        ["not a readable safetensors file"],
    ),
    (
        "llama_weights_for_gpt2",
        ["gpt2", *RUN, "--weights", "DIR:good", "--out", "OUT"],
        ["model_type='llama' checkpoint", "valid: 'gpt2'"],
    ),
    (
        "gpt2_weights_for_a_llama_config",
        ["DIR:good", *RUN, "--weights", "DIR:gpt2", "--out", "OUT"],
        ["unsupported architecture model_type='gpt2'"],
    ),
]
# Found only by loading the checkpoint: refused in one error line after the "building" progress line.
LOAD_REFUSED = [
    ("missing_tensor", ["llama-3.2-1b", *RUN, "--weights", "DIR:missing", "--out", "OUT"], ["1 missing"]),
    ("mis_shaped_tensor", ["llama-3.2-1b", *RUN, "--weights", "DIR:mis_shaped", "--out", "OUT"], ["of another shape"]),
]


def _checkpoints(root: Path) -> None:
    """A tiny Llama checkpoint, and copies that are not it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY)).save_pretrained(root / "good")
    tensors = load_file(root / "good" / "model.safetensors")

    def variant(name: str, config: dict, state: dict | None = None, raw: bytes | None = None) -> None:
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(config))
        if raw is not None:
            (root / name / "model.safetensors").write_bytes(raw)
        else:
            save_file(state, root / name / "model.safetensors", metadata={"format": "pt"})

    good_config = json.loads((root / "good" / "config.json").read_text())
    variant("int8", good_config, {key: value.to(torch.int8) for key, value in tensors.items()})
    variant("broken", good_config, raw=b"not a safetensors file" * 4)
    variant("gpt2", {"model_type": "gpt2", "n_embd": 64, "n_layer": 1, "n_head": 4, "vocab_size": 256},
            {"transformer.wte.weight": torch.zeros(256, 64)})  # fmt: skip
    variant("missing", good_config, {k: v for k, v in tensors.items() if k != "model.layers.0.mlp.down_proj.weight"})
    variant("mis_shaped", {**good_config, "intermediate_size": 256}, tensors)
    (root / "banana_rope").mkdir()
    (root / "banana_rope" / "config.json").write_text(json.dumps({**TINY, "rope_scaling": {"rope_type": "banana"}}))
    (root / "a_file").write_text("not a folder")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """Every case once, two at a time (each is a Python starting and importing torch)."""
    root = tmp_path_factory.mktemp("model_cli_inputs")
    _checkpoints(root)
    env = dict(os.environ, ROOFLINT_CACHE=str(root / "cache"), COLUMNS="200")
    cpu_ceilings.seed(env["ROOFLINT_CACHE"])  # the runs that load a checkpoint would measure the CPU's ceilings
    env.pop("ROOFLINT_DEBUG", None)

    def one(case) -> tuple[subprocess.CompletedProcess, Path]:
        name, arguments, _ = case
        out = root / "runs" / name / "out"
        out.parent.mkdir(parents=True)
        argv = [str(root / a.split(":", 1)[1]) if a.startswith("DIR:") else str(out) if a == "OUT" else a
                for a in arguments]  # fmt: skip
        done = subprocess.run(
            [ROOFLINT, "model", *argv], capture_output=True, text=True, timeout=300, cwd=out.parent, env=env
        )
        return done, out

    cases = REFUSED + LOAD_REFUSED
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip([case[0] for case in cases], pool.map(one, cases)))


@pytest.mark.parametrize("name, expected", [(c[0], c[2]) for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_refused_before_anything_is_built(outcomes, name, expected):
    done, out = outcomes[name]
    assert_refused(done, *expected)  # one line: no "building", no transformers warning
    assert not out.exists()  # nothing measured, not even an empty --out folder


@pytest.mark.parametrize("name, expected", [(c[0], c[2]) for c in LOAD_REFUSED], ids=[c[0] for c in LOAD_REFUSED])
def test_checkpoint_that_is_not_the_model_is_refused(outcomes, name, expected):
    done, out = outcomes[name]
    everything = done.stdout + done.stderr
    assert done.returncode == 2, everything
    assert "Traceback" not in everything and "LOAD REPORT" not in everything  # transformers' table silenced
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error:") and not any(line.startswith("error:") for line in lines[:-1]), done.stderr
    for text in expected:
        assert text in lines[-1], done.stderr
    assert not (out / "results.csv").exists()


def test_ctrl_c_in_a_sweep_keeps_the_points_measured(tmp_path):
    """SIGINT once the sweep's third point starts: the first two are rows on disk."""
    config = tmp_path / "tiny"
    config.mkdir()
    (config / "config.json").write_text(json.dumps(TINY))
    out = tmp_path / "out"
    env = dict(os.environ, ROOFLINT_CACHE=str(tmp_path / "cache"))
    cpu_ceilings.seed(env["ROOFLINT_CACHE"])
    env.pop("ROOFLINT_DEBUG", None)
    # RUN's --batch 1 replaced: an option given twice is refused
    run = [arg if previous != "--batch" else "1,2" for previous, arg in zip([None, *RUN], RUN)]
    argv = [ROOFLINT, "model", str(config), *run, "--dtype", "fp32", "--context", "8,16,24,32",
            "--out", str(out)]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    seen, deadline = "", time.monotonic() + 240
    try:
        while "sweep eager: B=1, context 24" not in seen and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            seen += line
        assert "context 24" in seen, seen
        process.send_signal(signal.SIGINT)
        seen += process.communicate(timeout=120)[1]
    finally:
        if process.poll() is None:
            process.kill()
    # 130 from the interrupt; 0 where Python swallowed it (it landed in a __del__) and the run finished
    assert process.returncode in (130, 0), seen
    assert process.returncode == 0 or "interrupted: the rows measured before it are in" in seen, seen
    rows = (out / "results.csv").read_text().splitlines()
    swept = [row for row in rows if "sweep=1" in row]
    assert len(swept) >= 2, "\n".join(rows)
