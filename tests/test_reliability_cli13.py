"""`rooflint model`'s path options, --config, its output folder and its peers, run as a user runs them
(the installed console script in a subprocess) where a CPU reaches the path. Each case is a bug found
that way: an empty --weights loading the current folder as the checkpoint, an explicit --config
ignored beside --weights, an empty --spec-file refused as "spec file . does not exist", a model run
writing over the last run's results.csv, and a GPU run with --hf-baseline --new-tokens 1 writing no
hf_static_compile row at all.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from console_script import assert_refused, needs_console_script, run_in
from result_factory import read_csv, row, write
from tiny_llama import TINY_LLAMA

QUICK_MODEL = ("--batch", "1", "--seq", "16", "--prompt", "8", "--new-tokens", "2", "--dtype", "fp32",
               "--device", "cpu", "--no-plots")  # fmt: skip


def rooflint(*argv, tmp_path: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return run_in(tmp_path, *argv, timeout=timeout)


@needs_console_script
@pytest.mark.parametrize("weights", ["", " "])
def test_an_empty_weights_is_refused_not_loaded_as_the_current_folder(tmp_path, weights):
    # `--weights "$CKPT"` with CKPT unset: "" became Path("."), the current folder, loaded as the checkpoint.
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    done = rooflint("model", "llama-3.2-1b", *QUICK_MODEL, "--weights", weights, "--out", "out", tmp_path=tmp_path)
    assert_refused(done, "--weights is empty", "checkpoint directory", "leave it out")
    assert not (tmp_path / "out").exists()


@needs_console_script
@pytest.mark.parametrize("config", ["nosuch", "gpt2-medium"])
def test_config_beside_weights_is_refused_not_ignored(tmp_path, config):
    # The checkpoint ran with its own config and the --config (even an unknown one) was never read.
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    tiny = transformers.GPT2Config(n_embd=64, n_layer=1, n_head=4, vocab_size=256, n_positions=64)
    transformers.GPT2LMHeadModel(tiny).save_pretrained(tmp_path / "ckpt")
    done = rooflint("model", "gpt2", *QUICK_MODEL, "--config", config, "--weights", "ckpt", "--out", "out",
                    tmp_path=tmp_path)  # fmt: skip
    assert_refused(done, f"--config {config}", "--weights checkpoint keeps its own config", "give one of them")
    assert not (tmp_path / "out").exists()


@needs_console_script
@pytest.mark.parametrize(
    "argv",
    [
        ("bench", "vector_add", "--device", "cpu"),
        ("model", "gpt2", "--device", "cpu"),
        ("lint", "results.csv"),
        ("report", "results.csv"),
        ("roofline", "results.csv"),
        ("doctor",),
        ("specs",),
        ("ceilings", "--device", "cpu"),
        ("profile", "vector_add", "--device", "cpu"),
    ],
    ids=lambda argv: argv[0],
)
def test_an_empty_spec_file_is_refused_saying_it_is_empty(tmp_path, argv):
    # "" became Path("."): refused as "spec file . does not exist", a file the caller never named.
    write([row("vector_add", "eager", 1.0)], tmp_path)
    done = rooflint(*argv, "--spec-file", "", tmp_path=tmp_path)
    assert_refused(done, "--spec-file is empty", "TOML file of GPUs", "leave it out")
    assert "spec file ." not in done.stderr


@needs_console_script
def test_a_model_run_keeps_the_previous_results_as_bench_does(tmp_path):
    # The model run opened results.csv over the last run's: its rows were gone, no results.prev.csv.
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    earlier = write([row("vector_add", "eager", 1.0)], tmp_path / "out").read_text()
    done = rooflint("model", "config.json", *QUICK_MODEL, "--out", "out", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "out" / "results.prev.csv").read_text() == earlier
    assert (tmp_path / "out" / "results.prev.json").exists()
    assert {r["family"] for r in read_csv(tmp_path / "out" / "results.csv")} == {"model:config"}


def test_a_gpu_run_with_one_new_token_writes_hf_static_compile_as_skipped():
    # hf_static_compiled measures nothing for --new-tokens 1 (its step is generate(N) - generate(1)
    # over N - 1 steps), and skipped_peer_rows wrote its skipped row only off a GPU: on a GPU the run
    # had no hf_static_compile row at all. Driven directly: a torch.device("cuda") needs no GPU.
    torch = pytest.importorskip("torch")
    from rooflint.models import peers
    from rooflint.models.outcome import ModelRequest
    from rooflint.outputs.results import SKIPPED

    cuda = torch.device("cuda")
    request = ModelRequest(model="llama-3.2-1b", config="llama-3.2-1b", batch=1, prompt=8, new_tokens=1,
                           dtype="bf16", hf_baseline=True)  # fmt: skip
    assert peers.hf_static_compiled(None, request, cuda, None, None, lambda text: None) == {}
    static = [
        r for r in peers.skipped_peer_rows("model:llama-3.2-1b", request, cuda) if r.variant == "hf_static_compile"
    ]
    assert len(static) == 1 and static[0].status == SKIPPED, static
    assert "--new-tokens" in static[0].message and "at least 2" in static[0].message
    assert (static[0].phase, static[0].batch) == ("decode", 1)
    # With two tokens it is measured on a GPU: no skipped row beside its measured one.
    request.new_tokens = 2
    skipped = peers.skipped_peer_rows("model:llama-3.2-1b", request, cuda)
    assert "hf_static_compile" not in {r.variant for r in skipped}


def test_rooflines_named_with_a_dotted_config_are_kept_as_prev_too(tmp_path):
    """A model's roofline-<config>-<set>-<phase>.* with a dot in the config (qwen2.5-0.5b) became
    .prev with its results before: it stayed beside the next run's results as if it were its plot."""
    from rooflint.engine.bench import keep_previous
    from rooflint.outputs.results import COLUMNS

    (tmp_path / "results.csv").write_text(",".join(COLUMNS) + "\n" + ",".join("x" for _ in COLUMNS) + "\n")
    names = ["roofline.png", "roofline-h100_sxm.svg", "roofline-qwen2.5-0.5b-triton-decode.png", "roofline-a.prev.png"]
    for name in names:
        (tmp_path / name).write_text(name)
    keep_previous(tmp_path)
    left = sorted(path.name for path in tmp_path.iterdir())
    # roofline-a.prev.png, the run before the last's, goes: it never drew the numbers now in results.prev.csv.
    assert left == sorted(["results.prev.csv", "roofline.prev.png", "roofline-h100_sxm.prev.svg",
                           "roofline-qwen2.5-0.5b-triton-decode.prev.png"])  # fmt: skip
