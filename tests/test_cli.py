"""The CLI: help for every command, version, list, specs, roofline, and one clear line for every bad input."""

import inspect
import os
import subprocess

import pytest
import typer
from console_script import ROOFLINT, needs_console_script
from typer.testing import CliRunner

from rooflint import __version__
from rooflint.cli.app import COMMANDS, app, help_text

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args))


def assert_one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_version_is_eager():
    result = invoke("--version", "bench", "nonsense")
    assert result.exit_code == 0 and __version__ in result.output


def _flat(text):
    """Help text without rich's box drawing and line wrapping, so a sentence reads as one line."""
    return " ".join(text.replace("│", " ").split())


@pytest.mark.parametrize("name, function", COMMANDS, ids=[name for name, _ in COMMANDS])
def test_every_command_has_help_with_its_summary_options_and_examples(name, function):
    result = invoke(name, "--help")
    assert result.exit_code == 0, result.output
    shown = _flat(result.output)
    assert f"Usage: rooflint {name} " in shown
    summary = function.__doc__.strip().splitlines()[0]
    assert _flat(summary) in shown  # the command's own first docstring line, not another's
    assert "Example" in shown
    command = typer.main.get_command(app).commands[name]
    options = [opt for param in command.params for opt in param.opts if opt.startswith("-")]
    for option in options:
        assert option in shown, f"rooflint {name} --help does not show {option}"


@needs_console_script
@pytest.mark.parametrize("name, function", COMMANDS, ids=[name for name, _ in COMMANDS])
def test_help_paragraphs_are_wrapped_by_the_terminal_not_the_source(name, function):
    """On a wide terminal each prose paragraph of a command's help is one line: the docstring's own
    line breaks (wrapped for the source at 100 columns) must not reach the terminal, where they left
    ragged lines at every other width. Example lines keep their own lines."""
    done = subprocess.run(
        [ROOFLINT, name, "--help"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "1000"}, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = [line.strip(" │") for line in done.stdout.splitlines()]
    paragraphs = [p for p in inspect.cleandoc(function.__doc__).split("\n\n") if not p.startswith("Examples:")]
    for paragraph in paragraphs:
        if any(line.startswith((" ", "- ")) for line in paragraph.splitlines()[1:]):
            continue  # a list keeps its lines
        assert " ".join(paragraph.split()) in lines, f"rooflint {name} --help breaks: {paragraph[:60]}..."
    examples = [p for p in inspect.cleandoc(function.__doc__).split("\n\n") if p.startswith("Examples:")]
    for example in examples[0].splitlines()[1:] if examples else []:
        assert example.strip() in lines, example


def test_help_text_joins_a_paragraph_and_keeps_examples_and_bullets():
    text = help_text("""Summary line.

    First sentence wraps
    onto a second line.

    - a bullet
    - another

    Examples:
      rooflint x
      rooflint y
    """)
    assert text.split("\n\n") == [
        "Summary line.",
        "First sentence wraps onto a second line.",
        "- a bullet\n- another",
        "Examples:\n  rooflint x\n  rooflint y",
    ]


def test_help_lists_every_registered_command_once():
    shown = _flat(invoke("--help").output)
    names = [name for name, _ in COMMANDS]
    for name in names:
        assert f" {name} " in shown, name
    assert len(set(names)) == len(names) and len({function for _, function in COMMANDS}) == len(COMMANDS)


def test_list_reports_what_runs_here():
    result = invoke("list")
    assert result.exit_code == 0
    assert "vector_add" in result.output and "needs a CUDA GPU" in result.output


def test_specs_table_and_one_gpu_with_sources():
    table = invoke("specs")
    assert table.exit_code == 0
    for key in (
        "t4",
        "a100_40gb_sxm",
        "a100_80gb_sxm",
        "a100_80gb_pcie",
        "h100_sxm",
        "h100_pcie",
        "h200",
        "l4",
        "l40s",
        "rtx_4090",
        "b200",
    ):
        assert key in table.output
    one = invoke("specs", "h100")
    assert one.exit_code == 0
    assert "https://" in one.output and "halved from a with-sparsity figure" in one.output


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["specs", "gtx_480"], ["unknown GPU", "h100_sxm"]),
        (["bench", "nonsense", "--device", "cpu"], ["unknown family", "vector_add"]),
        (["bench", "vector_add", "--device", "cpu", "--dtype", "fp64"], ["unknown dtype", "bf16"]),
        (["bench", "vector_add", "--device", "cpu", "--variants", "magic"], ["unknown variant", "triton"]),
        (["bench", "vector_add", "--device", "cpu", "--size", "huge"], ["unknown size", "small"]),
        (["bench", "vector_add", "--device", "cpu", "--size", "rows=5"], ["unknown size key", "n"]),
        (["bench", "vector_add", "--device", "cpu", "--size", "n=-3"], ["positive int"]),
        (["bench", "vector_add", "--device", "cpu", "--size", "n=0"], ["must be a positive int"]),
        (["bench", "weight_only_gemm", "--device", "cpu", "--size", "m=1,k=64,n=16,group=-1"], ["0 or a positive int"]),
        (["bench", "weight_only_gemm", "--device", "cpu", "--size", "m=8,k=768,n=16,group=7"], ["dividing k=768"]),
        (["bench", "weight_only_gemm", "--device", "cpu", "--size", "m=17,k=768,n=16,group=0"], ["m=17", "at most 16"]),
        (["bench", "vector_add", "--device", "tpu"], ["unknown device", "cuda, cpu"]),
        (["bench", "vector_add", "--device", "cuda"], ["no CUDA GPU"]),
        (["roofline", "--gpu", "voodoo2"], ["unknown GPU"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, fragments):
    assert_one_line_error(invoke(*args), *fragments)


def test_unwritable_output_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = invoke("bench", "vector_add", "--device", "cpu", "--variants", "eager", "--out", str(blocker / "out"))
    assert_one_line_error(result, "cannot write to output directory")


def test_malformed_results_file(tmp_path):
    bad = tmp_path / "results.csv"
    bad.write_text("this,is\nnot,rooflint\n")
    assert_one_line_error(invoke("roofline", str(bad), "--gpu", "t4", "--out", str(tmp_path)), "not a rooflint results")
    assert_one_line_error(invoke("roofline", str(tmp_path / "missing.csv"), "--gpu", "t4"), "does not exist")


def test_roofline_without_results_predicts_every_family(tmp_path):
    result = invoke("roofline", "--gpu", "h100_sxm", "--out", str(tmp_path))  # a roof for every precision
    assert result.exit_code == 0, result.output
    import csv

    with open(tmp_path / "roofline.csv", newline="") as handle:
        points = [row for row in csv.DictReader(handle) if row["point_kind"] == "predicted"]
    from rooflint.core.registry import family_names

    assert {p["family"] for p in points} == set(family_names())
    assert (tmp_path / "roofline.png").stat().st_size > 0
    from PIL import Image

    with Image.open(tmp_path / "roofline.png") as image:  # a palette PNG: the HTML report embeds it
        assert image.mode == "P" and image.size[0] > 1000


def test_spec_file_describes_an_unknown_gpu(tmp_path):
    spec = tmp_path / "mygpu.toml"
    spec.write_text('[mygpu]\nname = "My GPU"\nmemory_bandwidth_gbps = 500\ncuda_fp32_tflops = 10\n')
    result = invoke("specs", "mygpu", "--spec-file", str(spec))
    assert result.exit_code == 0 and "My GPU" in result.output
    spec.write_text("[mygpu]\nname = 'x'\ncuda_fp32_tflops = 10\n")
    assert_one_line_error(invoke("specs", "mygpu", "--spec-file", str(spec)), "needs memory_bandwidth_gbps")
    spec.write_text("[mygpu\n")
    assert_one_line_error(invoke("specs", "mygpu", "--spec-file", str(spec)), "not valid TOML")


def test_a_size_key_takes_0_where_the_familys_own_sizes_do():
    """weight_only_gemm's group=0 (per-channel scales) is one of its own sizes, so --size accepts it;
    vector_add's n never is 0, so there 0 stays refused (above)."""
    from rooflint.core.registry import get_family

    family = get_family("weight_only_gemm")
    [(label, params)] = family.cases("m=1,k=64,n=16,group=0")
    assert label == "custom" and params == {"m": 1, "k": 64, "n": 16, "group": 0}
