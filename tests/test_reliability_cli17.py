"""`rooflint ab`, `profile`, `ceilings`, `specs`, `list` and `new-family` run as a user runs them (the
installed console script in a subprocess), and the options they share. Each case is a bug found that
way:

- text that is not rooflint's own (an entry's or a variant's exception, a spec file's name or source,
  a plugin's variant name, an output path; also in bench's results table) was printed as rich markup:
  "[/x]" in it raised after the work was done (a traceback, exit 1, ab's --csv never written, a
  stored file reported as a crash), and "[bold]" or "[h100_sxm]" vanished from what was printed
  (new-family told the caller to cd into another folder); the entry point's last-resort error line
  raised the same way;
- an empty --size (bench, ab) or ab's --dtype ran the default without a word; ab's --csv and --source
  given empty were refused as ".", a path the caller never typed; ab refused for bad input left behind
  the folders on the way to its --csv;
- a --spec-file that is a folder was refused as "does not exist";
- profile said "no variant can run on cpu" where the variants asked for could, in another dtype, and
  never said why a variant could not or which could; stopped by SIGTERM it wrote no kernels.csv, the
  variants profiled before it lost;
- new-family wrote through a dangling link named like its test file, and a failed second file left
  the first behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import cpu_ceilings
import pytest
from console_script import ROOFLINT, assert_refused, needs_console_script, run_in

pytestmark = needs_console_script

ODD = "bad [/x] input [bold]"  # an exception's text that rich reads as a closing tag and a style

FAMILY_MODULE = '''
"""y = 2x, with a variant whose error has brackets in it, one named with them, and a slow one."""

import os
import pathlib
import time

from rooflint.core.family import Cost, Family, randn


def make_inputs(params, dtype, device, generator):
    return {"x": randn([params["n"]], dtype, device, generator)}


FAMILY = Family(
    "brackets",
    summary="y = 2x",
    sizes={"small": [{"n": 64}], "large": [{"n": 128}]},
    make_inputs=make_inputs,
    reference=lambda inputs, params: inputs["x"].double() * 2,
    cost=lambda params, dtype: Cost(cuda_flops=params["n"], bytes=2 * params["n"] * 4),
    dtypes=("fp32",),
)


@FAMILY.variant("eager", baseline=True)
def eager(case):
    """x * 2"""
    x = case["x"]
    return lambda: x * 2


@FAMILY.variant("broken", kind="compile")
def broken(case):
    """raises, its message holding brackets"""
    raise RuntimeError(ODD)


@FAMILY.variant("odd[/x]", kind="eager")
def odd(case):
    """a plugin's variant named with brackets"""
    x = case["x"]
    return lambda: x * 2


@FAMILY.variant("slow", kind="triton")
def slow(case):
    """says it started, then takes a minute to build"""
    pathlib.Path(os.environ["SLOW_MARKER"]).write_text("")
    time.sleep(60)
    x = case["x"]
    return lambda: x * 2
'''.replace("ODD", repr(ODD))


def family_env(folder: Path) -> dict[str, str]:
    """run_in's environment with the brackets family importable and named in ROOFLINT_FAMILY_MODULES."""
    (folder / "brackets_family.py").write_text(FAMILY_MODULE)
    cpu_ceilings.seed(folder / "cache")
    return dict(
        os.environ,
        ROOFLINT_CACHE=str(folder / "cache"),
        COLUMNS="200",
        PYTHONPATH=os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])),
        ROOFLINT_FAMILY_MODULES="brackets_family",
        SLOW_MARKER=str(folder / "slow-started"),
    )


def with_family(folder: Path, *argv) -> subprocess.CompletedProcess:
    env = family_env(folder)
    env.pop("ROOFLINT_DEBUG", None)
    return subprocess.run(
        [ROOFLINT, *map(str, argv)], capture_output=True, text=True, timeout=300, cwd=folder, env=env, check=False
    )


def test_ab_prints_an_entry_s_error_with_brackets_and_writes_its_csv(tmp_path):
    """The failed entry's reason was printed as markup: "[/x]" raised (a traceback, exit 1) before the
    table or --csv was written, the rounds of the entries that passed lost."""
    argv = ["-V", "eager,broken,odd[/x]", "--device", "cpu", "--rounds", "2", "--regime", "burst", "--csv", "ab.csv"]
    done = with_family(tmp_path, "ab", "brackets", *argv)
    assert done.returncode == 1, done.stderr  # an entry failed: exit 1, and no crash
    assert "Traceback" not in done.stdout + done.stderr
    assert f"broken at n=64: RuntimeError: {ODD}" in done.stdout
    assert f"broken dropped, not timed: RuntimeError: {ODD}" in done.stderr
    rows = (tmp_path / "ab.csv").read_text().splitlines()
    assert rows[0].startswith("shape,regime,entry") and len(rows) == 1 + 2  # two entries timed


def test_profile_prints_a_variant_s_error_with_brackets(tmp_path):
    """The error row's message was printed as markup: "[/x]" raised after kernels.csv was written."""
    done = with_family(tmp_path, "profile", "brackets", "-V", "eager,broken", "--device", "cpu", "--out", "p")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert f"error: RuntimeError: {ODD}" in done.stdout
    assert "wrote p/kernels.csv" in done.stdout
    assert ODD in (tmp_path / "p" / "kernels.csv").read_text()


def test_list_shows_a_plugin_variant_named_with_brackets(tmp_path):
    """A plugin's variant name went into the table as markup: `rooflint list` raised (exit 1)."""
    done = with_family(tmp_path, "list")
    assert done.returncode == 0, done.stderr
    assert "odd[/x]" in done.stdout


def test_the_last_resort_error_line_prints_a_message_with_brackets(monkeypatch, capsys):
    """An unexpected error's text was printed as markup by the entry point's last line of defence:
    "[/x]" in it raised there, a traceback after all."""
    from rooflint.cli import app as cli

    def crash(**_):
        raise RuntimeError(ODD)

    monkeypatch.setattr(cli, "app", crash)
    monkeypatch.setattr(sys, "argv", ["rooflint", "list"])
    monkeypatch.delenv("ROOFLINT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit:
        cli.main()
    assert exit.value.code == 1
    assert f"error: RuntimeError: {ODD} (set ROOFLINT_DEBUG=1" in " ".join(capsys.readouterr().err.split())


def test_specs_prints_a_spec_file_s_own_text_and_the_key(tmp_path):
    """A spec file's name and source were printed as markup: "[/x]" raised (a traceback, exit 1) in
    both tables, and the title's "[h100_sxm]" was taken for a style and dropped."""
    (tmp_path / "mine.toml").write_text(
        '[mygpu]\nname = "My GPU [/x] rev[b]"\n'
        'memory_bandwidth_gbps = { value = 1000, source = "sheet [table 3]", note = "see [/footnote]" }\n'
        "cuda_fp32_tflops = 10\n"
    )
    one = run_in(tmp_path, "specs", "mygpu", "--spec-file", "mine.toml")
    assert one.returncode == 0, one.stderr
    assert "My GPU [/x] rev[b] [mygpu] (user)" in one.stdout
    assert "sheet [table 3] — see [/footnote]" in one.stdout
    every = run_in(tmp_path, "specs", "--spec-file", "mine.toml")
    assert every.returncode == 0, every.stderr
    assert "My GPU [/x] rev[b]" in every.stdout
    assert "[h100_sxm]" in run_in(tmp_path, "specs", "h100").stdout


def test_output_paths_with_brackets_are_printed_as_written(tmp_path):
    """A folder's name was printed as markup: new-family printed "wrote out/..." and "cd 'out'" for
    --out "out[bold]" (a folder that is not the one written), and for "p[/x]" profile raised (exit 1,
    a traceback) after writing kernels.csv."""
    done = run_in(tmp_path, "new-family", "my_op", "--out", "out[bold]")
    assert done.returncode == 0, done.stderr
    assert "wrote out[bold]/my_op.py" in done.stdout and "cd 'out[bold]' &&" in done.stdout
    assert (tmp_path / "out[bold]" / "my_op.py").is_file()
    done = with_family(tmp_path, "profile", "brackets", "-V", "eager", "--device", "cpu", "--out", "p[/x]")
    assert done.returncode == 0, done.stderr
    assert "wrote p[/x]/kernels.csv" in done.stdout


def test_ceilings_prints_an_out_path_with_brackets(tmp_path):
    """`ceilings --out "c[/x]"` stored cpu.toml, then raised printing where (a traceback, exit 1)."""
    done = run_in(tmp_path, "ceilings", "--device", "cpu", "--out", "c[/x]")
    assert done.returncode == 0, done.stderr
    assert "wrote c[/x]/cpu.toml" in done.stdout
    assert (tmp_path / "c[" / "x]" / "cpu.toml").is_file()


@pytest.mark.parametrize("size", ["", " "])
@pytest.mark.parametrize("command", ["ab", "bench"])
def test_an_empty_size_is_refused(tmp_path, command, size):
    """`--size ""` (an unset shell variable) ran the default size, exit 0, in bench and ab."""
    variants = "eager,eager_unfused" if command == "ab" else "eager"
    done = run_in(tmp_path, command, "softmax", "-V", variants, "--device", "cpu", "--size", size)
    assert_refused(done, "--size is empty", "valid: small, large")
    assert not (tmp_path / "rooflint-out").exists()


def test_ab_refuses_an_empty_dtype(tmp_path):
    """`ab --dtype ""` ran the family's default dtype, exit 0, as if none had been given."""
    done = run_in(tmp_path, "ab", "softmax", "-V", "eager,eager_unfused", "--device", "cpu", "--dtype", "")
    assert_refused(done, "softmax has no dtype ''", "valid: fp32, fp16, bf16")


@pytest.mark.parametrize("option", ["--csv", "--source"])
def test_ab_refuses_an_empty_path_as_empty(tmp_path, option):
    """An empty --csv was refused as "--csv . is a folder", an empty --source as "--source .: not a
    readable .py file": a path the caller never typed."""
    done = run_in(tmp_path, "ab", "softmax", "-V", "eager,eager_unfused", "--device", "cpu", option, "")
    assert_refused(done, f"{option} is empty")


def test_ab_refused_leaves_no_folder_for_its_csv_and_creates_it_when_run(tmp_path):
    """The --csv check created the folders on the way to the file; refused after it (an unknown
    variant), ab left them behind, empty."""
    done = run_in(tmp_path, "ab", "softmax", "-V", "nosuch,eager", "--device", "cpu", "--csv", "new/sub/ab.csv")
    assert_refused(done, "unknown variant 'nosuch'")
    assert not (tmp_path / "new").exists()
    argv = ["-V", "eager,odd[/x]", "--device", "cpu", "--rounds", "2", "--regime", "burst", "--csv", "new/sub/ab.csv"]
    done = with_family(tmp_path, "ab", "brackets", *argv)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "new" / "sub" / "ab.csv").read_text().startswith("shape,regime,entry")


@pytest.mark.parametrize("command", [("specs",), ("profile", "softmax", "--device", "cpu")])
def test_a_spec_file_that_is_a_folder_says_so(tmp_path, command):
    """A folder given as --spec-file was refused as "spec file ... does not exist"."""
    (tmp_path / "gpus.toml").mkdir()
    assert_refused(run_in(tmp_path, *command, "--spec-file", "gpus.toml"), "spec file gpus.toml is a folder")


def test_profile_says_why_no_variant_asked_for_runs(tmp_path):
    """Both were "no variant of ... can run on cpu": for a GPU-only variant without why or which could,
    and for variants that run on the CPU, in another dtype than the one asked for."""
    done = run_in(tmp_path, "profile", "softmax", "-V", "triton", "--device", "cpu")
    assert_refused(done, "no variant of softmax can run on cpu", "triton: needs a CUDA GPU", "runnable here: eager")
    done = run_in(tmp_path, "profile", "attention", "-V", "eager_unfused", "--dtype", "fp8_e4m3", "--device", "cpu")
    assert_refused(done, "no variant of attention asked for has fp8_e4m3: eager_unfused (fp16/bf16)")
    assert not (tmp_path / "rooflint-out").exists()


def test_profile_stopped_by_sigterm_keeps_the_variants_profiled_before_it(tmp_path):
    """SIGTERM while a variant was built ended the profile with no kernels.csv: the variants profiled
    before it were lost. Now they are written and the profile exits 130, saying so."""
    env = family_env(tmp_path)
    marker = Path(env["SLOW_MARKER"])
    command = [ROOFLINT, "profile", "brackets", "-V", "eager,slow", "--device", "cpu", "--out", "p"]
    with subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as p:
        deadline = time.monotonic() + 120
        while not marker.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), p.communicate()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in out + err
    kernels = (tmp_path / "p" / "kernels.csv").read_text().splitlines()
    # -V eager names the kind too: odd[/x] is one, profiled before slow
    assert kernels[0].startswith("variant,kernel") and [line.split(",")[0] for line in kernels[1:]] == [
        "eager",
        "odd[/x]",
    ]


def test_new_family_refuses_a_dangling_link_in_its_place(tmp_path):
    """A dangling link named test_NAME.py passed the never-overwrite check: NAME.py was written, the
    test file was written through the link (or failed, leaving NAME.py alone behind)."""
    (tmp_path / "test_my_op.py").symlink_to(tmp_path / "missing" / "elsewhere.py")
    assert_refused(run_in(tmp_path, "new-family", "my_op"), "test_my_op.py already exists")
    assert sorted(path.name for path in tmp_path.iterdir() if path.name != "cache") == ["test_my_op.py"]


def test_new_family_writes_both_files_or_neither(tmp_path, monkeypatch):
    """The second file's failure left the first behind: a module without its test, and the next
    new-family of that name refused as "already exists"."""
    from rooflint.cli.commands import new_family
    from rooflint.core import paths
    from rooflint.core.errors import UserError

    write_text = paths.write_text

    def second_fails(path, text, what="file"):
        if path.name.startswith("test_"):
            raise UserError(f"cannot write {what} {path}: No space left on device")
        write_text(path, text, what)

    monkeypatch.setattr(paths, "write_text", second_fails)
    with pytest.raises(UserError, match="No space left"):
        new_family.write_family("my_op", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_bench_prints_a_variant_s_error_and_name_with_brackets(tmp_path):
    """bench's results table printed a row's message and names as markup: "[/x]" in a failing
    variant's error ended the run with "error: MarkupError" (exit 1) before the table and the
    "wrote" line, though the rows were on disk."""
    done = with_family(tmp_path, "bench", "brackets", "-V", "eager,broken,odd[/x]", "--device", "cpu", "--out", "b")
    assert done.returncode == 1, done.stdout + done.stderr  # a variant errored: exit 1, and no crash
    assert "Traceback" not in done.stdout + done.stderr and "MarkupError" not in done.stderr, done.stderr
    assert "odd[/x]" in done.stdout and "[/x] input [bold]" in done.stdout.replace("\n", ""), done.stdout
    assert "wrote b/results.csv" in done.stdout.replace("\n", "")


def test_bench_s_progress_bar_shows_a_bracket_named_variant_as_written():
    """The bar's description (the last row's family/variant) was rendered as markup: a variant named
    "odd[/x]" raised MarkupError in the bar's refresh thread whenever a refresh fell on that row (a
    traceback on stderr, at random)."""
    from rich.progress import Progress

    from rooflint.cli.commands.bench import progress_columns

    with Progress(*progress_columns(), auto_refresh=False, disable=True) as progress:
        bar = progress.add_task("bench on cpu", total=2)
        progress.update(bar, advance=1, description="brackets/odd[/x] fp32: ok")
        task = progress.tasks[0]
        assert progress_columns()[0].render(task).plain == "brackets/odd[/x] fp32: ok"


def test_bench_prints_an_out_folder_with_brackets_as_written(tmp_path):
    """bench's "wrote" line printed --out as markup: "o[/x]" raised after every row was written
    (error: MarkupError, exit 1); model and doctor printed their paths the same way. One helper,
    cli/console.print_written, now prints every command's written files."""
    argv = ["vector_add", "--device", "cpu", "--size", "small", "-V", "eager", "--out", "o[/x]"]
    done = run_in(tmp_path, "bench", *argv)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "MarkupError" not in done.stderr
    assert "wrote o[/x]/results.csv" in done.stdout.replace("\n", "")
