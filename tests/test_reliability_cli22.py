"""model, profile and plugin families, run as a user runs them (the installed console script in a
subprocess, or the CLI in-process where a GPU has to be faked). Each case is a bug found that way:

- a config.json whose pad_token_id is outside its vocabulary, or that nests a text_config, passed
  every check and crashed the run's first build (an AssertionError, an AttributeError, exit 1);
- a plugin family's cost model that counts negative bytes wrote an ok row (exit 0, plotted), and
  every reader then refused the whole results file over it;
- a plugin family named "" (or "a,b") ran under `bench all` into rows every reader refuses (or
  could never be asked for by name);
- `profile --ncu` with no `ncu` on PATH built, checked, profiled and timed every variant before it
  said so, and never printed the kernel table it had measured;
- a config.json with a quantization_config was measured as the unquantized model without a word;
- `roofline --gpu X --spec-file F` dropped, unsaid, every family whose cost model needs a peak F lacks.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import cpu_ceilings
import pytest
from console_script import ROOFLINT, assert_refused, needs_console_script, run_in
from tiny_llama import TINY_LLAMA

import rooflint.kernels.templates as templates

TEMPLATE = Path(templates.__file__).with_name("my_family.py").read_text()
QUICK_MODEL = ("--batch", "1", "--seq", "8", "--prompt", "4", "--new-tokens", "2", "--dtype", "fp32",
               "--device", "cpu", "--no-plots")  # fmt: skip


def with_plugin(tmp_path: Path, module: str, *argv) -> subprocess.CompletedProcess:
    """The console script with ``module`` (a file in tmp_path) named in ROOFLINT_FAMILY_MODULES."""
    env = dict(os.environ, ROOFLINT_CACHE=str(tmp_path / "cache"), COLUMNS="250", ROOFLINT_FAMILY_MODULES=module)
    cpu_ceilings.seed(env["ROOFLINT_CACHE"])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env.pop("ROOFLINT_DEBUG", None)
    return subprocess.run(
        [ROOFLINT, *map(str, argv)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def plugin(tmp_path: Path, module: str, name: str, *replacements: tuple[str, str]) -> None:
    """new-family's template as ``module``.py, its family named ``name``, with ``replacements`` made."""
    assert '    "my_family",\n' in TEMPLATE  # the Family(...) call's name argument
    source = TEMPLATE.replace('    "my_family",\n', f"    {json.dumps(name)},\n", 1)
    for old, new in replacements:
        assert old in source, old
        source = source.replace(old, new)
    (tmp_path / f"{module}.py").write_text(source)


@needs_console_script
@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"pad_token_id": 9999}, ["pad_token_id=9999 is outside the vocabulary", "valid: 0 to 255"]),
        ({"text_config": {"hidden_size": 64}}, ["text_config", "the language model's own config.json"]),
    ],
)
def test_a_config_json_transformers_cannot_build_is_refused_before_building(tmp_path, fields, expected):
    (tmp_path / "config.json").write_text(json.dumps({**TINY_LLAMA, **fields}))
    done = run_in(tmp_path, "model", "config.json", *QUICK_MODEL, "--out", "out")
    assert_refused(done, "config.json", *expected)
    assert not (tmp_path / "out").exists()


@needs_console_script
def test_a_cost_model_counting_negative_bytes_is_an_error_row_not_a_file_no_reader_takes(tmp_path):
    plugin(tmp_path, "negative_cost", "negative_cost", ("bytes=2 * n * size", "bytes=-2 * n * size"))
    argv = ("negative_cost", "-V", "eager", "--device", "cpu", "--size", "small", "--no-plots", "--out", "out")
    done = with_plugin(tmp_path, "negative_cost", "bench", *argv)
    assert done.returncode == 1, done.stdout + done.stderr  # was 0: an ok row with ideal_bytes -2000006
    rows = list(csv.DictReader((tmp_path / "out" / "results.csv").open()))
    assert [r["status"] for r in rows] == ["error"]
    assert "the cost model of negative_cost gives bytes=-2" in rows[0]["message"]
    linted = with_plugin(tmp_path, "negative_cost", "lint", "out/results.csv")
    assert linted.returncode == 1, linted.stdout + linted.stderr  # read, and failed on its error row
    assert "is negative" not in linted.stderr and "Traceback" not in linted.stdout + linted.stderr


@needs_console_script
@pytest.mark.parametrize("name", ["", "a,b"])
def test_a_plugin_family_whose_name_cannot_be_asked_for_is_refused(tmp_path, name):
    plugin(tmp_path, "odd_name", name)
    assert_refused(with_plugin(tmp_path, "odd_name", "list"), "odd_name", f"family name {name!r} cannot be asked for")


def test_profile_ncu_without_ncu_on_path_is_refused_before_profiling(tmp_path, monkeypatch):
    import torch
    from typer.testing import CliRunner

    from rooflint.cli.app import app
    from rooflint.engine import profile

    built = []
    # A GPU, without ncu. Faked where resolve_device reads it: a module first imported during the test
    # would otherwise bind a patched resolve_device for good (`from ... import`) and leak it.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr("rooflint.engine.worker.missing_requirement", lambda variant, device: None)
    monkeypatch.setattr(profile.ncu_tools, "ncu_path", lambda: None)
    monkeypatch.setattr(profile, "build", lambda *args: built.append(args[1].name) or pytest.fail("built"))
    result = CliRunner().invoke(app, ["profile", "vector_add", "-V", "eager", "--ncu", "--out", str(tmp_path / "p")])
    assert result.exit_code == 2, result.output
    assert "--ncu needs Nsight Compute's `ncu` on PATH" in result.output and "drop --ncu" in result.output
    assert built == [] and not (tmp_path / "p").exists()  # nothing built, profiled or written


@needs_console_script
def test_a_config_json_with_a_quantization_config_says_it_is_not_applied(tmp_path):
    """A quantized checkpoint's config.json (say an FP8 release's): its shapes are built with random
    weights in --dtype. The rows are the unquantized model's, and the run says so."""
    quantized = {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0}
    (tmp_path / "config.json").write_text(json.dumps({**TINY_LLAMA, "quantization_config": quantized}))
    done = run_in(tmp_path, "model", "config.json", *QUICK_MODEL, "--out", "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "quantization_config is not applied" in done.stderr and "random fp32" in done.stderr


@needs_console_script
def test_roofline_names_the_families_a_spec_file_has_no_peak_for(tmp_path):
    """A spec file with the bandwidth and bf16 tensor cores only: the families whose cost models need
    another peak (fp32 CUDA cores, say) have no predicted point, and the command says which."""
    spec = tmp_path / "mine.toml"
    spec.write_text('[mine]\nname = "Mine"\nmemory_bandwidth_gbps = 2000\ntensor_bf16_tflops = 400\n')
    done = run_in(tmp_path, "roofline", "--gpu", "mine", "--spec-file", str(spec), "--out", "out")
    assert done.returncode == 0, done.stdout + done.stderr
    [note] = [line for line in done.stderr.splitlines() if line.startswith("note: no point for")]
    drawn = {row["family"] for row in csv.DictReader((tmp_path / "out" / "roofline.csv").open())}
    missing = note.split("note: no point for ", 1)[1].split(":", 1)[0].split(", ")
    assert missing and not drawn & set(missing) and "softmax" in missing, note
